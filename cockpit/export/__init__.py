"""What the cockpit hands to other tools: Prometheus metrics (`metrics`) and the HTTP
endpoint serving them (`server`)."""
