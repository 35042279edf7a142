"""The book *How To Scale Your Model* as a library: pure Python, SI units.

Modules: hardware, roofline, collectives, transformer, training, inference, rules.
"""
