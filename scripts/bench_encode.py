#!/usr/bin/env python3
"""Encode benchmark: vidq's pipeline (`vidq encode`) against plain FFmpeg doing the same work.

For the seed's three inputs (720p clips of 10.08 s, 15.08 s and 19.10 s, generated here),
each round runs, in alternating order, `vidq encode CLIP --out DIR` and the very same
ffprobe (probe), ffprobe (timing), ffmpeg (one encode per rung) and ffmpeg (thumbnail) command
lines that `vidq encode --print-commands` reports, each under /usr/bin/time. vidq also decodes
the source's last GOP to find where its frames end; the plain side does not, so that decode
is in the ratio. It prints the median wall time, the
ratio, and peak resident memory (vidq's own and FFmpeg's).

    python3 scripts/bench_encode.py [--rounds 5] [--vidq target/release/vidq]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile

CLIPS = [10.08, 15.08, 19.10]


def clip_path(root, seconds):
    path = os.path.join(root, f"seed_{seconds:.2f}s_720p.mp4")
    if not os.path.exists(path):
        subprocess.run(
            ["ffmpeg", "-nostdin", "-v", "error", "-y",
             "-f", "lavfi", "-i", f"testsrc2=size=1280x720:rate=30:duration={seconds}",
             "-f", "lavfi", "-i", f"sine=frequency=440:duration={seconds}",
             "-c:v", "libx264", "-preset", "medium", "-pix_fmt", "yuv420p",
             "-c:a", "aac", "-shortest", path],
            check=True)
    return path


def timed(argv):
    """(wall seconds, peak RSS KiB) of one command, from GNU time."""
    with tempfile.NamedTemporaryFile("r") as report:
        subprocess.run(["/usr/bin/time", "-o", report.name, "-f", "%e %M"] + argv,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall, rss = report.read().split()
        return float(wall), int(rss)


def run_vidq(vidq, clip, out):
    shutil.rmtree(out, ignore_errors=True)
    wall, rss = timed([vidq, "encode", clip, "--out", out])
    shutil.rmtree(out, ignore_errors=True)
    summary = subprocess.run([vidq, "encode", clip, "--out", out], check=True,
                             capture_output=True, text=True).stdout
    own = json.loads(summary)["vidq_peak_rss_kib"]
    shutil.rmtree(out, ignore_errors=True)
    return wall, rss, own


def print_commands(vidq, clip, out):
    """The command lines `vidq encode` runs; also creates the directories they write into."""
    shutil.rmtree(out, ignore_errors=True)
    return json.loads(subprocess.run(
        [vidq, "encode", clip, "--out", out, "--print-commands"],
        check=True, capture_output=True, text=True).stdout)


def run_plain(vidq, clip, out):
    commands = print_commands(vidq, clip, out)
    total, peak = 0.0, 0
    # The thumbnail is taken from the encoded MP4, so it runs after the encode.
    for argv in [commands["probe"], commands["timing"], *commands["encode"], commands["thumbnail"]]:
        wall, rss = timed(argv)
        total += wall
        peak = max(peak, rss)
    shutil.rmtree(out, ignore_errors=True)
    return total, peak


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--vidq", default="target/release/vidq")
    parser.add_argument("--clips", default="target/bench-clips")
    args = parser.parse_args()
    os.makedirs(args.clips, exist_ok=True)
    work = tempfile.mkdtemp(prefix="vidq-bench-")
    out = os.path.join(work, "out")
    print(f"{'clip':>8} | {'vidq encode s':>13} | {'plain ffmpeg s':>14} | {'ratio':>6} | "
          f"{'peak RSS MiB':>12} | {'vidq own RSS MiB':>16} | {'plain peak MiB':>14}")
    for seconds in CLIPS:
        clip = clip_path(args.clips, seconds)
        vidq_runs, plain_runs = [], []
        for round_no in range(args.rounds):
            # Alternate the order so neither side always runs on a warmer cache.
            if round_no % 2 == 0:
                vidq_runs.append(run_vidq(args.vidq, clip, out))
                plain_runs.append(run_plain(args.vidq, clip, out))
            else:
                plain_runs.append(run_plain(args.vidq, clip, out))
                vidq_runs.append(run_vidq(args.vidq, clip, out))
        v_wall = statistics.median(r[0] for r in vidq_runs)
        p_wall = statistics.median(r[0] for r in plain_runs)
        v_rss = statistics.median(r[1] for r in vidq_runs) / 1024
        v_own = statistics.median(r[2] for r in vidq_runs) / 1024
        p_rss = statistics.median(r[1] for r in plain_runs) / 1024
        print(f"{seconds:>7.2f}s | {v_wall:>13.2f} | {p_wall:>14.2f} | {v_wall / p_wall:>6.3f} | "
              f"{v_rss:>12.1f} | {v_own:>16.1f} | {p_rss:>14.1f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
