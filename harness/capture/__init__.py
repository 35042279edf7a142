"""Stage 1, capture: a jitted function (or a registered workload's) run under the XLA profiler.

Takes a function and its arguments; gives a ``Capture`` (``steps``): the trace directory
(``*.xplane.pb``), the program's compiled HLO and XLA's cost analysis, and ``meta``: the
untraced steps' wall and CPU times, the memory fit checked after compile (``memory``) and what
ran where (``environment``: backend, devices, versions, the program's fingerprint, the commit).
``program`` is how the user's function is lowered, compiled and called (``jax.jit``, ``nnx.jit``
or a plain function), ``arguments`` what each step is given and what the compiled program is
specialised to, ``driver`` the steps one at a time and the warm-up that lasts until the program
stops compiling anew.

A script of the user's own (``harness profile``) runs in a process of its own (``script``, which
starts ``child``): traced in segments (``segments``), its meshes recorded (``meshes``), Ctrl-C
handled as it would be alone (``interrupt``); the profiler is started as every capture starts it
(``profiler``).
"""
