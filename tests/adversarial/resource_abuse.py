"""Waste resources between honest cells: infinite loop, sleep past the timeout, memory bomb, huge output, full disk.

Each bad cell is cut (timeout interrupt, MemoryError, ENOSPC, output cap) and grading goes on:
every exercise is solved, so every test cell must still pass.
"""

INJECT = [
    ("after", "setup", "while True:\n    pass"),
    ("after", "setup", "import time\ntime.sleep(10_000)"),
    ("after", "setup", "import numpy as np\nbomb = [np.ones(10**9) for _ in range(100)]"),
    ("after", "setup", "for _ in range(100_000):\n    print('x' * 100)"),
    ("after", "setup", "n = 0\nwhile True:\n    open(f'fill{n}.bin', 'wb').write(b'0' * 2**20)\n    n += 1"),
]
