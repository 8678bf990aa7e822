"""The managed job and the parts it is made of: launch, supervision, membership, recovery,
checkpoints.
"""
