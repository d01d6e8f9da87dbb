"""Event time: fixed-width UTC buckets, per-partition watermarks, and the bucket roller."""
