"""Drives switchboard's embedded registry with python-consul (Debian's
python3-consul 0.7.1), as a Python service would. Run by registryd's Go test
TestPythonConsulClient: argv is HOST PORT. It prints one JSON line
{"ready": INDEX} once it is about to block, then waits for the Go test to
change the service and prints one JSON line with what it saw.
"""
import json
import sys
import time

import consul


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    c = consul.Consul(host=host, port=port)
    out = {}
    out["registered"] = c.agent.service.register(
        "pysvc", service_id="pysvc-1", address="127.0.0.1", port=5000,
        tags=["py"], check=consul.Check.ttl("10s"))
    _, nodes = c.health.service("pysvc", passing=True)
    out["passing_before_ttl_pass"] = len(nodes)
    out["ttl_pass"] = c.agent.check.ttl_pass("service:pysvc-1", "ok from python")
    index, nodes = c.health.service("pysvc", passing=True)
    out["passing_after_ttl_pass"] = len(nodes)
    out["output"] = [ch["Output"] for ch in nodes[0]["Checks"] if ch["CheckID"] == "service:pysvc-1"]
    out["index1"] = int(index)
    print(json.dumps({"ready": int(index)}), flush=True)

    start = time.monotonic()
    index2, nodes = c.health.service("pysvc", passing=True, index=index, wait="10s")
    out["blocked_seconds"] = time.monotonic() - start
    out["index2"] = int(index2)
    out["ids"] = sorted(n["Service"]["ID"] for n in nodes)
    out["tags"] = sorted({t for n in nodes for t in n["Service"]["Tags"]})

    out["deregistered"] = c.agent.service.deregister("pysvc-1")
    out["services_left"] = sorted(c.agent.services().keys())
    _, catalog = c.catalog.services()
    out["catalog"] = catalog
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
