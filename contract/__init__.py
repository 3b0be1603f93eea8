"""The contract between mirrorwatch's parts: the words, schema, names and causes they share.

Everything else in mirrorwatch may import this package; it imports nothing of mirrorwatch and
nothing beyond the standard library, so a training client that reads it loads neither the
exporter nor its server stack (tests/contract/test_imports.py holds both to it).
"""
