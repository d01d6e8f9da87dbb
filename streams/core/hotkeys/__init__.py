"""Hot keys: bounded-memory sliding sketches per worker, merged views, and the decider."""
