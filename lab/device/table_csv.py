"""Writes a README table's CSV for the lab's table scripts: the header row and the rows, into a
temporary file then renamed over OUT, so a failed script never leaves half a table behind."""
import csv
import os


def write_table(out, head, rows):
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out + ".tmp", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(head)
        w.writerows(rows)
    os.replace(out + ".tmp", out)
    print(f"{out}: {len(rows)} rows")
