"""A fork bomb: every process forks until the process limit stops it.

The process limit stops it, the kernel's PID namespace dies with the kernel, and the
solved exercises still score.
"""

INJECT = [("after", "setup", "import os\nwhile True:\n    os.fork()")]
