"""A stand-in for elbencho's service mode (elbencho --help-dist), for tests on machines without elbencho: how the
storage phase starts a service on every node, runs the master on the first and quits them, not elbencho itself.

- `elbencho --service --foreground --port P`: listens on P (every address) until a connection says "quit";
- `elbencho --hosts h:p,... [options] PATH`: asks every service to run (each must answer), then prints a real
  multi-host capture of elbencho (tests/fixtures/io_tools/elbencho/, whose README names the source);
- `elbencho --hosts h:p,... --quit`: tells every service to quit;
- without --hosts (a node alone): prints the same capture.
Every call appends its arguments to argv beside the installed program, and a service each word it gets ("service
PORT: run"). broken=True: a service that cannot bind its
port (it says so, as elbencho does, and exits 3)."""

import sys
from pathlib import Path

CAPTURE = (Path(__file__).resolve().parents[1] / "fixtures" / "io_tools" / "elbencho" /
           "elbencho-2.1-0-multihost-4hosts-mkdirs-write-direct-resfile.txt")

PROGRAM = r'''#!%(python)s
import socket, sys
args = sys.argv[1:]
with open(%(argv)r, "a") as fh:
    fh.write("elbencho %%s\n" %% " ".join(args))
if "--service" in args:
    if %(broken)r:
        print("ERROR: Unable to bind service port")
        sys.exit(3)
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", int(args[args.index("--port") + 1])))
    srv.listen(8)
    while True:
        conn, _ = srv.accept()
        word = conn.makefile().readline().strip()
        if not word:  # a connection that only checks the port listens
            conn.close()
            continue
        with open(%(argv)r, "a") as fh:
            fh.write("service %%s: %%s\n" %% (args[args.index("--port") + 1], word))
        conn.sendall(b"ok\n")
        conn.close()
        if word == "quit":
            sys.exit(0)
if "--hosts" in args:
    for svc in args[args.index("--hosts") + 1].split(","):
        host, port = svc.rsplit(":", 1)
        conn = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
        conn.sendall(b"quit\n" if "--quit" in args else b"run\n")
        if conn.makefile().readline().strip() != "ok":
            print("ERROR: Communication with service %%s failed" %% svc)
            sys.exit(1)
    if "--quit" in args:
        sys.exit(0)
sys.stdout.write(open(%(capture)r).read())
'''


def install(bin_dir, broken=False):
    """bin_dir/elbencho (made executable); returns bin_dir (a Path)."""
    bin_dir = Path(bin_dir)
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "elbencho"
    path.write_text(PROGRAM % {"python": sys.executable, "argv": str(bin_dir / "argv"), "broken": broken,
                               "capture": str(CAPTURE)})
    path.chmod(0o755)
    return bin_dir
