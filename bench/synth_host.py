"""The synthetic agent of `bench/fleet.py`: what each pretend host runs, started by sshd.

It emits realistic gpu/host/train records at the real rate (8 GPUs, 1 Hz), resuming from
`--from` like the real agent, and sleeps on stdin until the next tick.

A module of its own, imported rather than run as a script: 256 of them start at once on
the machine that also runs the cockpit, and Python compiles a script given by path on
every start (`bench/fleet.py` is 500 lines: about 8 ms of CPU each, 2 s for the fleet),
while an imported module's bytecode is cached. What the cockpit receives is the same.
On a real fleet this start-up is paid on each GPU host, not on the cockpit's machine;
here it is paid on the cockpit's cores, so it is kept to the interpreter's own.
Standard library only, and cheap: records are formatted from templates.

    python -S -c "import sys; sys.path.insert(0, BENCH_DIR); import synth_host; \
        sys.exit(synth_host.main(sys.argv[1:]))" --from SEQ --host NAME
"""

# `posix` rather than `os`: it is built in, where `os` costs a millisecond or two of
# imports (collections.abc, posixpath) at every start.
import posix
import select
import sys
import time

GPUS = 8


def command(python: str, bench_dir: str) -> list[str]:
    """argv that starts this agent (without `--from`/`--host`, which the link adds)."""
    boot = (f"import sys; sys.path.insert(0, {bench_dir!r}); import synth_host; "
            "sys.exit(synth_host.main(sys.argv[1:]))")
    return [python, "-S", "-c", boot]


def main(argv: list[str]) -> int:
    return synth_agent(argv)


def synth_agent(argv: list[str]) -> int:
    after = int(argv[argv.index("--from") + 1])
    host = argv[argv.index("--host") + 1]
    out = sys.stdout.buffer
    stdin = sys.stdin.fileno()
    gpu = (
        '{"t":"gpu","seq":%d,"ts":%.3f,"gpu":%d,"uuid":"GPU-%s-%d","sim":true,'
        '"util":%.1f,"mem_util":%.1f,"mem_used":%d,"mem_total":85899345920,"temp":%.1f,'
        '"power":%.1f,"power_limit":700.0,"sm_clock":1980,"mem_clock":2619,"fan":null,'
        '"throttle":0,"ecc_vol_corr":0,"ecc_vol_unc":0,"ecc_agg_corr":0,"ecc_agg_unc":0,'
        '"retired_pages":0,"remap_pending":false,"pcie_tx":%.1f,"pcie_rx":%.1f,'
        '"pcie_replay":0,"nvlink_err":0,"procs":[{"pid":%d,"mem":%d,"rank":%d}]}\n'
    )
    hostrec = (
        '{"t":"host","seq":%d,"ts":%.3f,"cpu":%.1f,"load1":%.2f,"load5":%.2f,"load15":%.2f,'
        '"mem_used":%d,"mem_total":2164392632320,"swap_used":0,"swap_total":0,'
        '"disk_path":"/data","disk_used":%d,"disk_total":7681501126656,'
        '"disk_read":%.1f,"disk_write":%.1f,"net_rx":%.1f,"net_tx":%.1f,"procs":[]}\n'
    )
    train = (
        '{"t":"train","seq":%d,"ts":%.3f,"job":"bench","rank":%d,"step":%d,"epoch":%.3f,'
        '"stage":"train","loss":%.5f,"nonfinite":null,"lr":0.0003,"samples":32,'
        '"tokens":65536,"step_time":%.4f,"data_time":0.01,"compute_time":0.8,'
        '"comm_time":0.1,"ckpt_time":null,"loss_scale":65536.0,"grad_norm":%.4f,"extra":{}}\n'
    )
    header = (
        '{"t":"stream","seq":0,"ts":%.3f,"protocol":1,"agent_version":"bench",'
        '"journal_id":"bench-%s","from":%d,"first":1,"head":%d}\n'
    )
    seq = after
    now = time.time()
    out.write((header % (now, host, after, after)).encode())
    out.flush()
    tick = int(now) + 1
    step = after // (GPUS + 2)
    while True:
        wait = tick - time.time()
        if wait > 0:
            ready, _, _ = select.select([stdin], [], [], wait)
            if ready and not posix.read(stdin, 4096):
                return 0  # the cockpit closed the channel
        ts = time.time()
        step += 1
        lines = []
        for g in range(GPUS):
            seq += 1
            phase = (step + g) % 10
            lines.append(
                gpu
                % (
                    seq,
                    ts,
                    g,
                    host,
                    g,
                    90 + phase,
                    40 + phase,
                    60 << 30,
                    65 + phase,
                    600 + phase,
                    1e4,
                    2e4,
                    4000 + g,
                    60 << 30,
                    g,
                )
            )
        seq += 1
        lines.append(
            hostrec % (seq, ts, 40.0, 30.1, 29.5, 28.0, 900 << 30, 3 << 40, 1e7, 5e6, 1e8, 1e8)
        )
        seq += 1
        lines.append(train % (seq, ts, 0, step, step / 1000, 2.5 - step * 1e-5, 1.01, 0.9))
        try:
            out.write("".join(lines).encode())
            out.flush()
        except BrokenPipeError:
            return 0
        tick += 1
        if tick < time.time() - 5:  # fell far behind (suspended): skip ahead, do not burst
            tick = int(time.time()) + 1
