"""Try to leave the sandbox: network (a port that listens on the grading machine's loopback), the instructor's source notebook, the gradebook, writing outside scratch,
and another copy of the course outside the build (a clone of the repository beside this one).

Each probe prints one line; the test reads them from the autograded notebook. Nothing here
changes a score: every exercise stays solved, so every test cell must still pass.
"""

PROBES = r'''
import os, socket, glob
def _attempt(action):
    try:
        action()
        return "SUCCEEDED"
    except Exception as err:  # noqa: BLE001
        return "blocked"
def _net():
    s = socket.socket(); s.settimeout(3); s.connect(("127.0.0.1", {listen_port}))
def _read(path):
    return lambda: open(path, "rb").read(1)
def _write():
    open({outside!r}, "w").write("escaped")
print("probe network:", _attempt(_net))
print("probe source notebook:", _attempt(_read({source_notebook!r})))
print("probe gradebook:", _attempt(_read({gradebook!r})))
print("probe write outside scratch:", _attempt(_write))
print("probe listing sources:", "SUCCEEDED" if glob.glob({source_glob!r}) else "blocked")
print("probe course copy outside the build:", _attempt(_read({course_copy!r})))
print("probe listing other clones:", "SUCCEEDED" if glob.glob({clone_glob!r}) else "blocked")
'''

INJECT = [("after", "setup", PROBES)]
