"""Run Python files one after another in this interpreter, each as ``__main__`` in its own cwd.

Usage: ``python run_block_files.py JOBS.json RESULTS.jsonl``. JOBS is a list of
``{"id", "path", "cwd", "cache"}``; one JSON line per finished file goes to RESULTS
(``ok``, ``error`` with the traceback, ``seconds``). Each file sees a fresh global namespace,
``sys.argv == [path]``, its own ``TILELANG_CACHE_DIR``, and the environment and cwd are restored
after it, so files do not see each other's variables.
"""

import json
import os
import runpy
import sys
import time
import traceback


def main(jobs_path: str, results_path: str) -> None:
    with open(jobs_path) as f:
        jobs = json.load(f)
    with open(results_path, "a") as results:
        for job in jobs:
            env, cwd, argv = dict(os.environ), os.getcwd(), list(sys.argv)
            os.chdir(job["cwd"])
            os.environ["TILELANG_CACHE_DIR"] = job["cache"]
            sys.argv = [job["path"]]
            print(f"==== {job['id']}", flush=True)
            start, error = time.perf_counter(), None
            try:
                runpy.run_path(job["path"], run_name="__main__")
            except SystemExit as e:
                if e.code not in (None, 0):
                    error = f"SystemExit({e.code!r})"
            except BaseException:  # noqa: BLE001 - every failure is the block's result
                error = traceback.format_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.chdir(cwd)
                os.environ.clear()
                os.environ.update(env)
                sys.argv = argv
            results.write(json.dumps({"id": job["id"], "ok": error is None, "error": error,
                                      "seconds": round(time.perf_counter() - start, 2)}) + "\n")
            results.flush()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
