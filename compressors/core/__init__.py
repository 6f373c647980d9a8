"""What every codec shares: the interface (``base``), the registry of methods, the wire format,
parameter declarations (``params``) and numeric helpers (bit packing, the counter hash, pairwise
sums, chunking, Dettmers' dynamic tree type)."""
