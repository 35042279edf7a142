"""The book *How To Scale Your Model* as a library: pure Python (stdlib only), SI units.

Modules: dtypes (element types: bytes and names), hardware (chips), topology (slices),
roofline, collectives, transformer, training, inference, costs (OpDesc/Cost types), rules
(per-opcode costs, ``RULES``) and step (a workload's step as the book models it:
``Analytic``, ``BookPart``).
"""
