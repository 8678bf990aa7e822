"""A small character-level language model trained with the cockpit hook."""
