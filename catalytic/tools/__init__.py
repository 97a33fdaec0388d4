"""The work behind ``catalytic bench``, ``catalytic calibrate`` and ``catalytic warmup``
(:mod:`catalytic.cli` parses their arguments): the peer benchmark suite, the cost-model
calibration and the Numba cache warm-up. With the CLI they are the command-line layer,
the top of the package: nothing else in catalytic imports them."""
