"""Recordings to and from S3-compatible object storage: `cockpit archive REC s3://…`,
and `cockpit replay|report s3://…` (`recordings`), over the one module that talks to
the storage (`s3`)."""
