"""`cxlsim bench train`: data-parallel training among local processes that share an emulated pool.

Modules: `models` (numpy models on one flat parameter vector), `data` (the datasets and
every rank's batches), `config` (the run's settings), `context` (what a mode's loop gets:
communicator, batches, paced compute, step log, snapshots), `modes` (the mode records and
the dispatch by name), `sync` and `ddp` (the synchronous loops) with `comm_thread` (their
allreduces off the main thread), `shared_state` and `elastic`
(the async and hybrid loops), `launcher` (ranks, evaluation, the record), `run_record`
(train.json and steps.csv), `cli` (the `bench train` subcommand). See docs/bench-train.md.
"""
