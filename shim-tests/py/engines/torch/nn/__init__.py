from .modules.module import Module  # noqa: F401
from .parameter import Parameter  # noqa: F401
