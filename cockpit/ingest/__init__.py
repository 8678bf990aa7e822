"""Wire chunks from the transport to the store: routing by type, batching, one writer."""
