"""Widgets of the cockpit: one per module, each fed by attributes set from above."""
