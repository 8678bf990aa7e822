"""The read model: snapshot building (one module per instrument), details, the train tail
and the reports, which mirror the panes.
"""
