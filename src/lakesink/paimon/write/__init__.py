"""Writes, engine-neutral: one batch write (`batch`), one streaming sink (`stream`), and the
planning of a keyed write; the engine passes query ids and executors in."""
