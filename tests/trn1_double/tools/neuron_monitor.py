"""neuron-monitor as the double runs it: one JSON report per period (from -c <config>), one
neuron_runtime_data entry per process holding cores, each core at 0 % (no published figure for
this model: utilization is not modelled)."""
import json
import os
import sys
import time

from trn1_platform import rules


def live_reservations() -> dict[int, list[int]]:
    log = rules.platform_root() / "var/log/trn1-double.jsonl"
    found = {}
    if log.exists():
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event["event"] == "reserved" and os.path.exists(f"/proc/{event['pid']}"):
                found[event["pid"]] = event["cores"]
    return found


args = sys.argv[1:]
period = 1.0
if "-c" in args:
    config = json.loads(open(args[args.index("-c") + 1]).read())
    period = float(str(config.get("period", "1s")).rstrip("s"))
while True:
    runtimes = [{"pid": pid, "error": "", "report": {
                    "neuroncore_counters": {"neuroncores_in_use": {
                        str(core): {"neuroncore_utilization": 0.0} for core in cores}, "error": ""},
                    "memory_used": {"neuron_runtime_used_bytes": {"neuron_device": 0}, "error": ""}}}
                for pid, cores in live_reservations().items()]
    print(json.dumps({"neuron_runtime_data": runtimes}), flush=True)
    time.sleep(period)
