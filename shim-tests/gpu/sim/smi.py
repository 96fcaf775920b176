"""Self-test's nvidia-smi: device memory used and total, in MiB, as `nvidia-smi --query-gpu=
memory.used,memory.total --format=csv,noheader,nounits` prints them, read from the fake driver's
machine-wide state (/dev/shm/fakecuda-<FAKECUDA_MACHINE>: shim-tests/fakecuda/src/shm.rs, Layout:
magic u64, state u32, devices u32, total[16] u64, used[16] u64), the way nvidia-smi reads the
driver's without creating a context. Usage: smi.py DEVICE"""
import os
import struct
import sys

MAGIC = 0x4643_5544_414B_0001
with open(f"/dev/shm/fakecuda-{os.environ.get('FAKECUDA_MACHINE', 'default')}", "rb") as f:
    head = f.read(16 + 2 * 16 * 8)
magic, _state, devices = struct.unpack_from("<QII", head, 0)
dev = int(sys.argv[1])
if magic != MAGIC or dev >= devices:
    sys.exit(f"smi.py: not a fakecuda machine file, or no device {dev}")
total = struct.unpack_from("<Q", head, 16 + 8 * dev)[0]
used = struct.unpack_from("<Q", head, 16 + 16 * 8 + 8 * dev)[0]
print(f"{used >> 20}, {total >> 20}")
