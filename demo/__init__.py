"""`make demo`: the whole mirrorwatch pipeline on loopback, without Docker or a GPU.

`demo.receiver` is also the compose stack's `alert-log` service, run by the exporter image's
Python from a read-only mount: it, and this file, import only the standard library and the
mirrorwatch base install that image has (`mirrorwatch.contract.vocabulary`).
"""
