"""The operator side of the training cockpit: transport, store, analysis and the TUI."""

__version__ = "0.1.0"
