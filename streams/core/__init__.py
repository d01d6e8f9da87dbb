"""The pure core: IDs, time buckets, routing, hot keys, aggregates, serde, simulation.

Nothing here imports a Kafka client or faust (import-linter enforces it), so every
rule can be tested in microseconds and reused by any edge.
"""
