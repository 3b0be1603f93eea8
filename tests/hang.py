"""How long a test waits for a child process before calling it hung.

A guard against a hang, not a speed check: on a machine busy with other work (users run
`make test` beside their own jobs; a load of 30 on 2 cores has been seen) a TensorFlow import,
a two-rank DDP run or a promtool run takes many times its idle time, and a timeout sized to
the idle time fails a correct test. Speed is measured under bench/, never asserted here.
"""

HANG_SECONDS = 600
