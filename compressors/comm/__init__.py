"""Averaging gradients across ranks: the ``Reducer`` and the compressed collectives it runs
(allreduce, allgather, sra), written once as programs (``pipeline``) that run blocking or
overlapped; error feedback; the accounting of bytes on the wire and of time per phase; the options
that the Reducer and the DDP hooks both check (``options``)."""
