"""The kernel client's ready check (autograder.sandbox.ReadyKernelClient).

jupyter_client's wait_for_ready reads IOPub until it has been silent for 0.2 s; ours returns once
the kernel has answered kernel_info on shell and published that request's status on IOPub. The
scripted kernel below answers on in-memory channels, so each case is exact: what was asked, what
was left unread, what was raised.
"""

import asyncio
import queue
import sys
from collections import deque
from pathlib import Path

import nbformat
import pytest
from jupyter_client.asynchronous import AsyncKernelClient
from nbformat.v4 import new_code_cell, new_notebook

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autograder.sandbox import GradingExecute, GuardedKernelClient, ReadyKernelClient  # noqa: E402


class Channel:
    """An in-memory channel: get_msg pops the oldest message, or raises queue.Empty at once."""

    def __init__(self):
        self.messages: deque = deque()

    async def get_msg(self, timeout=None):
        if not self.messages:
            raise queue.Empty
        return self.messages.popleft()


def message(msg_type: str, parent: str | None, **content) -> dict:
    """A kernel message of msg_type answering the request parent (None: no request, as at start-up)."""
    return {"msg_type": msg_type, "parent_header": {"msg_id": parent} if parent else {}, "content": content}


class ScriptedClient(ReadyKernelClient):
    """A ReadyKernelClient talking to a scripted kernel: answers[k] says what the k-th kernel_info request gets."""

    def __init__(self, answers: list[set[str]], alive: bool = True, before: int = 0):
        """answers: per request, which of {'reply', 'status'} the kernel sends; before: start-up messages (no parent)
        already waiting on IOPub."""
        super().__init__()
        self._shell, self._iopub = Channel(), Channel()
        self._iopub.messages.extend(message("status", None, execution_state="starting") for _ in range(before))
        self.answers, self.alive, self.asked, self.handled = answers, alive, [], []

    shell_channel = property(lambda self: self._shell)
    iopub_channel = property(lambda self: self._iopub)

    def kernel_info(self):
        msg_id = f"info-{len(self.asked)}"
        answer = self.answers[len(self.asked)] if len(self.asked) < len(self.answers) else set()
        self.asked.append(msg_id)
        if "status" in answer:  # busy is published before the reply is sent, idle after it
            self._iopub.messages.append(message("status", msg_id, execution_state="busy"))
        if "reply" in answer:
            self._shell.messages.append(message("kernel_info_reply", msg_id, protocol_version="5.3"))
        if "status" in answer:
            self._iopub.messages.append(message("status", msg_id, execution_state="idle"))
        return msg_id

    def _handle_kernel_info_reply(self, msg):
        self.handled.append(msg["parent_header"]["msg_id"])

    async def _async_is_alive(self):
        return self.alive


def test_ready_once_the_reply_and_its_status_came_leaving_the_rest_of_iopub_unread():
    client = ScriptedClient([{"reply", "status"}], before=3)
    asyncio.run(client.wait_for_ready(timeout=5))
    assert client.asked == ["info-0"] and client.handled == ["info-0"]
    # jupyter_client's flush reads IOPub dry (and then waits 0.2 s more); the idle status is still there
    assert [(m["msg_type"], m["parent_header"], m["content"]) for m in client.iopub_channel.messages] == [
        ("status", {"msg_id": "info-0"}, {"execution_state": "idle"})]


def test_a_reply_whose_status_never_reached_iopub_is_asked_again():
    # a late subscription: the first request's status was published before IOPub was connected
    client = ScriptedClient([{"reply"}, {"reply", "status"}])
    asyncio.run(client.wait_for_ready(timeout=5))
    assert client.asked == ["info-0", "info-1"] and client.handled == ["info-1"]


def test_a_reply_to_an_earlier_request_counts_and_other_replies_do_not():
    client = ScriptedClient([{"status"}, {"reply", "status"}])
    client.shell_channel.messages.append(message("kernel_info_reply", "someone-else"))
    client.shell_channel.messages.append(message("execute_reply", "info-0"))
    asyncio.run(client.wait_for_ready(timeout=5))
    assert client.handled == ["info-1"]
    assert not client.shell_channel.messages


def test_a_kernel_that_died_before_answering_raises():
    client = ScriptedClient([], alive=False)
    with pytest.raises(RuntimeError, match="Kernel died before replying to kernel_info"):
        asyncio.run(client.wait_for_ready(timeout=5))
    assert client.asked == ["info-0"]


def test_a_kernel_that_never_answers_raises_once_the_timeout_is_spent():
    client = ScriptedClient([])
    with pytest.raises(RuntimeError, match="Kernel didn't respond in 0 seconds"):
        asyncio.run(client.wait_for_ready(timeout=0))
    assert client.asked == ["info-0"]


def test_grading_kernels_get_the_ready_client_and_a_real_kernel_s_first_output_is_kept(tmp_path):
    """No sandbox: GradingExecute's manager makes GuardedKernelClients (ReadyKernelClients, as the sandboxed managers'
    are), and a kernel readied by one delivers the first cell's output (IOPub was connected when wait_for_ready
    returned)."""
    assert issubclass(GuardedKernelClient, ReadyKernelClient)
    nb = new_notebook(cells=[new_code_cell("print('first', 6 * 7)"), new_code_cell("1 / 0")],
                      metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    executor = GradingExecute(timeout=60, allow_errors=True, scratch=str(tmp_path), preload_modules=[])
    clients = []
    make = executor.create_kernel_manager

    def recording_manager():
        km = make()
        clients.append(km.client_factory)
        return km

    executor.create_kernel_manager = recording_manager
    executor.preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    assert clients == [GuardedKernelClient] and ReadyKernelClient is not AsyncKernelClient
    assert nb.cells[0].outputs[0]["text"] == "first 42\n"
    assert nb.cells[1].outputs[0]["ename"] == "ZeroDivisionError"


def test_the_record_run_readies_its_kernel_with_the_ready_client(tmp_path, monkeypatch):
    """trusted_checks runs each source notebook in a plain NotebookClient: its kernel is readied by ReadyKernelClient."""
    from autograder import trusted_checks

    readied = []
    ready = ReadyKernelClient.wait_for_ready

    async def counted(self, timeout=None):
        readied.append(type(self))
        await ready(self, timeout)

    monkeypatch.setattr(ReadyKernelClient, "wait_for_ready", counted)
    path = tmp_path / "source.ipynb"
    path.write_text(nbformat.writes(new_notebook(cells=[new_code_cell("import os\nprint(os.environ['PART_II_CHECKS'])")],
                                                 metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                          "language": "python"}})), encoding="utf-8")
    nb = asyncio.run(trusted_checks._run_in_record_mode(path, timeout=60))
    assert readied == [ReadyKernelClient]
    assert nb.cells[0].outputs[0]["text"] == "record\n"
