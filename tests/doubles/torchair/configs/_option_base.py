"""TEST DOUBLE — not torchair. Option holders that reject what the real torchair.configs reject, with its messages."""

import os


class OptionValue:
    """One option: a default and, when given, the list of allowed values."""

    def __init__(self, default, optional=None):
        self.default = default
        self.optional = optional
        self._value = default

    def __bool__(self):
        return bool(self._value)

    @property
    def value(self):
        """Like torchair: stored as a string, bools as "1"/"0"."""
        if self._value is None:
            return None
        if isinstance(self._value, bool):
            return "1" if self._value else "0"
        return str(self._value)

    @value.setter
    def value(self, v):
        if isinstance(self.optional, (list, tuple)) and v not in self.optional:
            raise ValueError(
                f"Value {v!r} (type: {type(v)}) not in optional list {self.optional!r} "
                f"(type: {type(self.optional[0]) if self.optional else None})."
            )
        self._value = v


class IntRangeValue(OptionValue):
    def __init__(self, default, low, high):
        super().__init__(default)
        self.low, self.high = low, high

    @OptionValue.value.setter
    def value(self, v):
        if not isinstance(v, int):
            raise ValueError(f"Please set integer type, but got {type(v)}")
        if v < self.low or v > self.high:
            raise ValueError(f"Please set value in [{self.low}, {self.high}], {v} is out of range.")
        self._value = v


class MustExistedPathValue(OptionValue):
    @OptionValue.value.setter
    def value(self, v):
        if v is None or not os.path.isdir(v):
            raise FileNotFoundError(f"Please set legal dir path, {v} is not found or is not a file directory!")
        self._value = v


class FileValue(OptionValue):
    @OptionValue.value.setter
    def value(self, v):
        if v is not None and not os.path.isfile(v):
            raise FileNotFoundError(f"Please set legal file path, {v} is not found or is not a file!")
        self._value = v


class CallableValue(OptionValue):
    @OptionValue.value.setter
    def value(self, v):
        if v is not None and not callable(v):
            raise ValueError(f"Please set a callable or None, but got {type(v)}")
        self._value = v


class NpuBaseConfig:
    """Attributes that exist at construction are the options; setting any other name is a ValueError."""

    def __init__(self):
        self._fixed_attrs = [k for k, v in self.__dict__.items() if isinstance(v, (OptionValue, NpuBaseConfig))]

    def __setattr__(self, key, value):
        if "_fixed_attrs" not in self.__dict__:
            object.__setattr__(self, key, value)
            return
        if key not in self._fixed_attrs:
            raise ValueError(f"{type(self).__name__} has no option {key}, all options {self._fixed_attrs}")
        current = getattr(self, key)
        if isinstance(current, OptionValue):
            current.value = value
        else:
            object.__setattr__(self, key, value)

    def changed_options(self):
        """{dotted name: value as torchair stores it} of every option set away from its default (double only)."""
        flat = {}
        for key in self._fixed_attrs:
            item = getattr(self, key)
            if isinstance(item, NpuBaseConfig):
                flat.update({f"{key}.{k}": v for k, v in item.changed_options().items()})
            elif isinstance(item, OptionValue) and item._value != item.default:
                flat[key] = item.value
        return flat
