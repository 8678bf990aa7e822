"""Screens of the cockpit: the main instruments and the drill-downs."""
