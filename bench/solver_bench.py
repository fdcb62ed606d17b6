"""Solver benchmark: time and peak memory of `solve` for 5 to 10,000 nodes on a 30-service
template with must/can't-coexist groups, hardware/image restrictions and min/max/ratio
constraints. Not a test: run it and copy the table into docs/benchmarks.md ("## Solver").

    .venv/bin/python bench/solver_bench.py [--repeat 7] [--random 900 --seed 1]
"""

from __future__ import annotations

import argparse
import platform
import random
import resource
import statistics
import time
import tracemalloc
from typing import Any

from contracts.catalog import Catalog
from services.solver.domain import SolveError, SolveRequest, solve

PROVIDER = "sim"
HARDWARE = {  # name: (flavor, cost)
    "small": ("s1", 0.05),
    "medium": ("m1", 0.10),
    "large": ("l1", 0.20),
    "worker-large": ("w1", 0.30),
    "worker-xlarge": ("w2", 0.45),
    "memory-xl": ("x1", 0.60),
}
IMAGES = ["ubuntu22", "centos7", "rocky9"]

EVERYWHERE = ["base", "ntp", "node-exporter", "logrotate", "firewall"]
MASTERS = ["hdfs-namenode", "yarn-resourcemanager", "hbase-master", "mapreduce-historyserver", "hive-metastore", "spark-historyserver"]
WORKERS = ["hdfs-datanode", "yarn-nodemanager", "hbase-regionserver", "impala-daemon"]
EDGE = ["hue", "hive-server2", "oozie"]
OTHERS = [
    "hdfs-secondarynamenode", "zookeeper-server", "kafka-broker", "kafka-connect", "hadoop-gateway",
    "prometheus", "alertmanager", "grafana", "elasticsearch", "kibana", "mysql-server", "impala-catalog",
]  # fmt: skip
SERVICES = EVERYWHERE + MASTERS + WORKERS + EDGE + OTHERS


def _q(lo: int = 0, hi: int | None = None, ratio: dict[str, float] | None = None) -> dict[str, Any]:
    quantities: dict[str, Any] = {"min": lo}
    if hi is not None:
        quantities["max"] = hi
    if ratio:
        quantities["ratio"] = ratio
    return {"quantities": quantities}


def template() -> dict[str, Any]:
    constraints = {
        **{s: _q(1, 1) for s in MASTERS},
        "hdfs-namenode": {"hardwaretypes": ["large", "memory-xl"], **_q(1, 1)},
        "hdfs-secondarynamenode": {"hardwaretypes": ["large", "memory-xl"], **_q(0, 1)},
        "hdfs-datanode": {"hardwaretypes": ["worker-large", "worker-xlarge"], **_q(1, None, {"max": 90})},
        "zookeeper-server": {"hardwaretypes": ["small", "medium"], **_q(1, 5)},
        "kafka-broker": {"hardwaretypes": ["medium", "large"], **_q(1, 20, {"max": 25})},
        "hadoop-gateway": _q(1, None, {"min": 2}),
        "prometheus": _q(1, 1),
        "grafana": _q(0, 1),
        "elasticsearch": {"imagetypes": ["ubuntu22", "rocky9"], **_q(1, None, {"max": 20})},
        "kibana": _q(0, 1),
        "mysql-server": {"imagetypes": ["centos7", "rocky9"], **_q(1, 1)},
        "impala-catalog": _q(1, 1),
        "hue": _q(1, 3),
    }
    return {
        "name": "platform",
        "defaults": {"services": SERVICES, "provider": PROVIDER, "imagetype": "ubuntu22"},
        "compatibility": {"services": SERVICES},
        "constraints": {
            "layout": {
                "mustcoexist": [MASTERS, WORKERS, EDGE, ["kafka-broker", "kafka-connect"], ["prometheus", "alertmanager"]],
                "cantcoexist": [
                    ["hdfs-namenode", "hdfs-datanode"], ["hdfs-namenode", "hdfs-secondarynamenode"],
                    ["zookeeper-server", "hdfs-datanode"], ["zookeeper-server", "hdfs-namenode"],
                    ["kafka-broker", "hdfs-datanode"], ["kafka-broker", "hdfs-namenode"],
                    ["elasticsearch", "hdfs-datanode"], ["elasticsearch", "hdfs-namenode"],
                    ["hue", "hdfs-datanode"], ["hue", "hdfs-namenode"], ["prometheus", "hdfs-datanode"],
                    ["mysql-server", "hdfs-datanode"], ["impala-catalog", "hdfs-datanode"],
                    ["hadoop-gateway", "hdfs-datanode"], ["kibana", "hdfs-datanode"], ["grafana", "hdfs-datanode"],
                ],  # fmt: skip
            },
            "services": constraints,
            "size": {"min": 1, "max": 10000},
        },
    }


def catalog() -> Catalog:
    return Catalog.model_validate(
        {
            "providers": {PROVIDER: {"name": PROVIDER, "providertype": "simulated"}},
            "hardwaretypes": {
                name: {"name": name, "providermap": {PROVIDER: {"flavor": flavor, "cost": str(cost)}}}
                for name, (flavor, cost) in HARDWARE.items()
            },
            "imagetypes": {name: {"name": name, "providermap": {PROVIDER: {"image": f"img-{name}"}}} for name in IMAGES},
            "services": {name: {"name": name} for name in SERVICES},
            "clustertemplates": {"platform": template()},
        }
    )


def measure(cat: Catalog, request: SolveRequest, repeat: int) -> tuple[float, float, float, int]:
    """Median wall ms, median CPU ms, peak traced MiB, groups in the answer."""
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        layout = solve(cat, request)
        cpus.append((time.process_time() - cpu) * 1000)
        walls.append((time.perf_counter() - wall) * 1000)
    tracemalloc.start()
    solve(cat, request)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return statistics.median(walls), statistics.median(cpus), peak / 2**20, len(layout.layout)


def operations(cat: Catalog) -> list[tuple[str, SolveRequest]]:
    """Changes to existing clusters, at the largest size."""
    grown = solve(cat, SolveRequest(template="platform", nodes=1000))
    big = solve(cat, SolveRequest(template="platform", nodes=10000))
    later = ("grafana", "kibana", "hadoop-gateway")
    without = solve(cat, SolveRequest(template="platform", nodes=10000, services=tuple(s for s in SERVICES if s not in later)))
    return [
        ("expand 1,000 -> 10,000", SolveRequest(template="platform", nodes=10000, existing=grown)),
        ("shrink 10,000 -> 2,000", SolveRequest(template="platform", nodes=2000, existing=big)),
        ("add 3 services, 10,000 nodes", SolveRequest(template="platform", nodes=10000, existing=without, add_services=later)),
        ("remove 2 services, 10,000 nodes", SolveRequest(template="platform", nodes=10000, existing=big, remove_services=("grafana", "kibana"))),
        ("10,000 nodes, first answer excluded", SolveRequest(template="platform", nodes=10000, exclude=(big,))),
    ]


def random_catalog(rnd: random.Random) -> Catalog:
    """8-16 services with random bounds, hardware/image restrictions, up to 3 must-coexist
    and 12 can't-coexist groups: no one would write such templates, which is the point."""
    services = [f"s{i}" for i in range(rnd.randint(8, 16))]
    hardware, images = [f"h{i}" for i in range(4)], ["i0", "i1", "i2"]
    constraints: dict[str, Any] = {}
    for service in services:
        if rnd.random() < 0.7:
            q: dict[str, Any] = {"min": rnd.choice([0, 0, 1, 1, 2, 3])}
            if rnd.random() < 0.5:
                q["max"] = max(q["min"], rnd.choice([1, 1, 2, 3, 5, 20, 500]))
            if rnd.random() < 0.3:
                q["ratio"] = {"min": rnd.choice([0, 1, 5, 10, 30]), "max": rnd.choice([30, 50, 90, 100])}
            constraints[service] = {
                "hardwaretypes": rnd.sample(hardware, rnd.randint(0, 3)),
                "imagetypes": rnd.sample(images, rnd.randint(0, 2)),
                "quantities": q,
            }
    groups = lambda k: [rnd.sample(services, rnd.randint(2, 3)) for _ in range(k)]  # noqa: E731
    layout = {"mustcoexist": groups(rnd.randint(0, 3)), "cantcoexist": groups(rnd.randint(0, 12))}
    return Catalog.model_validate(
        {
            "providers": {PROVIDER: {"name": PROVIDER, "providertype": "simulated"}},
            "hardwaretypes": {h: {"name": h, "providermap": {PROVIDER: {"flavor": h, "cost": str(rnd.randint(1, 5))}}} for h in hardware},
            "imagetypes": {i: {"name": i, "providermap": {PROVIDER: {"image": i}}} for i in images},
            "services": {s: {"name": s} for s in services},
            "clustertemplates": {
                "random": {
                    "name": "random",
                    "defaults": {"services": services, "provider": PROVIDER},
                    "constraints": {"layout": layout, "services": constraints},
                }
            },
        }
    )


def sweep(count: int, seed: int) -> None:
    """Solve `count` random templates at random sizes; print the spread of times."""
    rnd = random.Random(seed)
    times, outcomes = [], {"solved": 0, "unsolvable": 0, "invalid": 0}
    for _ in range(count):
        cat = random_catalog(rnd)
        request = SolveRequest(template="random", nodes=rnd.choice([5, 37, 100, 1000, 10000]))
        start = time.perf_counter()
        try:
            solve(cat, request)
            outcomes["solved"] += 1
        except SolveError as err:
            outcomes[err.kind] += 1
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    cut = lambda q: times[min(len(times) - 1, int(q * len(times)))]  # noqa: E731
    print(f"{count} random templates (seed {seed}): {outcomes}")
    print(f"ms: median {cut(0.5):.1f}, p90 {cut(0.9):.1f}, p99 {cut(0.99):.1f}, max {times[-1]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--random", type=int, default=0, metavar="N", help="also solve N random templates")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    cat = catalog()
    print(f"template: {len(SERVICES)} services; python {platform.python_version()} on {platform.machine()}")
    rows = [(f"new cluster, {n:,} nodes", SolveRequest(template="platform", nodes=n)) for n in (5, 100, 1000, 10000)]
    print(f"| {'what':38} | wall ms | CPU ms | peak MiB | groups |")
    print(f"|{'-' * 40}|--------:|-------:|---------:|-------:|")
    for label, request in rows + operations(cat):
        wall, cpu, peak, groups = measure(cat, request, args.repeat)
        print(f"| {label:38} | {wall:7.1f} | {cpu:6.1f} | {peak:8.2f} | {groups:6} |")
    if args.random:
        sweep(args.random, args.seed)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"whole benchmark process, max RSS (interpreter, pydantic and all): {rss:.0f} MiB")


if __name__ == "__main__":
    main()
