"""Sessions: what feeds the UI a snapshot - live (streaming into a store), replay (a
recording) and static (fixed snapshots).
"""
