"""Stored records: made (`runner`), kept and verified (`results`, `storage`, `recheck`), judged (`assess`,
`rederive`) and kept current (`canary`).

May import `experiments/` and everything below it; never `compute/` or `book/`.
"""
