"""What the agent records and serves: the journal, the spool tailer, the stream to the
cockpit and the control inbox.
"""
