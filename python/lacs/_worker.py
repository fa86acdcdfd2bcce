"""A worker of the Python harness (lacs/workers.py says why and how):

    python3 -m lacs._worker READ_FD WRITE_FD python:FILE_OR_MODULE:FUNCTION

Imports the implementation, says hello with its declaration, then for each
request calls it (check.call_function) and sends back its outputs as float64
arrays, or why it skipped or failed. Its stdout is the harness's stderr.
Between two cases the working directory is put back.
"""

import os
import sys


def main(argv):
    read_fd, write_fd, spec = int(argv[1]), int(argv[2]), argv[3]
    # What the implementation prints goes to stderr, never to a pipe of the protocol.
    os.dup2(2, 1)
    from . import check, workers
    reader = workers._Reader(read_fd)
    try:
        fn = check.load_impl(spec)
        description = check.describe_impl(fn)
    except check.HarnessError as e:
        workers.send(write_fd, {"ok": False, "error": str(e)})
        return 0
    workers.send(write_fd, {"ok": True, "describe": description})
    home = os.getcwd()
    while True:
        try:
            request, arrays = reader.receive()
        except EOFError:
            return 0
        info = check.CaseInfo.from_dict(request["case"]) if "case" in request else None
        answer = check.call_function(fn, request["op"], dict(arrays), request["params"], info)
        try:
            os.chdir(home)
        except OSError:
            pass
        sys.stdout.flush()
        sys.stderr.flush()
        if isinstance(answer, dict):
            workers.send(write_fd, {"status": "ok"}, list(answer.items()))
        else:
            status, message, trace = answer
            workers.send(write_fd, {"status": status, "message": message, "traceback": trace})


if __name__ == "__main__":
    sys.exit(main(sys.argv))
