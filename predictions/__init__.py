"""The book *How To Scale Your Model* as a library: pure Python (stdlib only), SI units.

Modules: hardware (chips), roofline, collectives, transformer, training, inference,
costs (OpDesc/Cost types) and rules (per-opcode costs, ``RULES``).
"""
