"""The ``cpu`` chip, measured on this host: the programs timed (``programs``) and the chip they
make (``chip``)."""
