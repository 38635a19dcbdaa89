# Imports 46 of python3.11's extension modules (each a dlopen, some pulling in
# libssl, libcrypto, libsqlite3...) and prints how long that took.
# docs/PERFORMANCE.md: "Libraries loaded later".
import time
t=time.perf_counter()
import decimal, ssl, sqlite3, ctypes, _json, bz2, lzma, zlib, hashlib, csv, select, mmap, array, math, _socket, unicodedata, _pickle, _struct, binascii, _random, _bisect, _heapq, _datetime, readline, _queue, _multiprocessing, _asyncio, _contextvars, _elementtree, pyexpat, _lsprof, _opcode, _posixsubprocess, resource, termios, fcntl, grp, _uuid, _ctypes, _hashlib, _ssl, _sqlite3, _decimal, _bz2, _lzma, _curses
print("import ms", round((time.perf_counter()-t)*1000,1))
