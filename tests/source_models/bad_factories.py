"""Factories that fail in the ways user code does: raise, hang, crash the interpreter, return the wrong thing."""

import ctypes
import time


def raises():
    raise ValueError("no weights at /nonexistent")  # line 8


def hangs():
    time.sleep(600)


def segfaults():
    ctypes.string_at(0)  # reads address 0: SIGSEGV


def wrong_shape():
    return "not a model"
