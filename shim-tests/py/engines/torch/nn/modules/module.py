"""torch/nn/modules/module.py of the simulated torch: the functions through which PyTorch moves
and loads parameters keep their names and nesting (Module.to -> Module._apply ->
Module.to.<locals>.convert -> Tensor.to)."""
from ..._tensor import Tensor, device as _device_t, dtype as _dtype_t
from ..parameter import Parameter


class Module:
    def __init__(self):
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_modules", {})

    def __setattr__(self, name, value):
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        elif name in self._buffers:
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        for d in ("_parameters", "_buffers", "_modules"):
            table = self.__dict__.get(d, {})
            if name in table:
                return table[name]
        raise AttributeError(name)

    def register_buffer(self, name, tensor, persistent=True):
        self._buffers[name] = tensor

    def add_module(self, name, module):
        self._modules[name] = module

    def children(self):
        return iter(self._modules.values())

    def named_modules(self, prefix=""):
        yield prefix, self
        for name, m in self._modules.items():
            yield from m.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_parameters(self, prefix=""):
        for mname, m in self.named_modules(prefix):
            for pname, p in m._parameters.items():
                if p is not None:
                    yield (f"{mname}.{pname}" if mname else pname), p

    def parameters(self):
        for _, p in self.named_parameters():
            yield p

    def named_buffers(self, prefix=""):
        for mname, m in self.named_modules(prefix):
            for bname, b in m._buffers.items():
                if b is not None:
                    yield (f"{mname}.{bname}" if mname else bname), b

    def _apply(self, fn):
        for module in self.children():
            module._apply(fn)
        for key, param in self._parameters.items():
            if param is None:
                continue
            param_applied = fn(param)
            self._parameters[key] = Parameter(param_applied)
        for key, buf in self._buffers.items():
            if buf is not None:
                self._buffers[key] = fn(buf)
        return self

    def to(self, *args, **kwargs):
        device, dtype = kwargs.get("device"), kwargs.get("dtype")
        for a in args:
            if isinstance(a, _dtype_t):
                dtype = a
            elif isinstance(a, (str, int, _device_t)):
                device = a

        def convert(t):
            return t.to(device, dtype if t.is_floating_point() else None)

        return self._apply(convert)

    def cuda(self, device=None):
        return self._apply(lambda t: t.cuda(device))

    def load_state_dict(self, state_dict, strict=True, assign=False):
        missing = []
        for name, param in self.named_parameters():
            if name in state_dict:
                self._load_from_state_dict(param, state_dict[name])
            else:
                missing.append(name)
        if strict and missing:
            raise RuntimeError(f"Missing key(s) in state_dict: {missing[:4]}")

    def _load_from_state_dict(self, param, input_param):
        param.copy_(input_param)

    def state_dict(self):
        return dict(self.named_parameters())

    def eval(self):
        return self

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)


__all__ = ["Module", "Tensor"]
