"""Check 6b: one JAX array (XLA allocates through the driver API). Preallocation is off so the
array's memory is what XLA asks for when it is created."""
import os

from common import finish, kit, skip

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
try:
    import jax
    import jax.numpy as jnp
except ImportError as e:
    skip(f"JAX is not installed ({e})")
try:
    gpu = jax.devices("gpu")[0]
except RuntimeError as e:
    skip(f"JAX sees no GPU ({e})")

NBYTES = 64 << 20
x = jax.device_put(jnp.zeros(NBYTES // 4, dtype=jnp.float32), gpu)
x.block_until_ready()
kit(pid=os.getpid(), device=0, bytes=int(x.nbytes), jax=jax.__version__)
finish()
