"""boot_id: which boot of the node this is (the kernel's random boot id) and how long it has been up.

The destructive roles read it before and after a reboot or a fault injection: a changed boot id is the proof that
the node really rebooted (a node that answers SSH again may never have gone down), and the probe's own start is
the moment a plain command ran on the node.
"""

import socket
import time

from probes.common.readers import read_text
from probes.params import Params

PARAMS = Params()
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


def run(art, params, out_dir):
    art.facts["hostname"] = socket.gethostname()
    boot_id = (read_text(BOOT_ID_PATH) or "").strip()
    if not boot_id:
        art.error("cannot read %s" % BOOT_ID_PATH)
        return
    art.facts["boot_id"] = boot_id
    art.add("command_ran_at", round(time.time(), 3), "s_epoch")
    uptime = (read_text("/proc/uptime") or "").split()
    if uptime:
        art.add("uptime_s", float(uptime[0]), "s")
