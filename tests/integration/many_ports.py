"""Many upstreams for forward-mode tests: one listening port each on
127.0.0.1, all answered by one thread."""

import selectors
import socket
import threading

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"


class ManyPorts:
    """count listening sockets on 127.0.0.1 served by one selectors loop:
    each request head gets RESPONSE, the connection stays open."""

    def __init__(self, count):
        self.sel = selectors.DefaultSelector()
        self.ports = []
        self.socks = []
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen(16)
            s.setblocking(False)
            self.sel.register(s, selectors.EVENT_READ, None)
            self.socks.append(s)
            self.ports.append(s.getsockname()[1])
        self.stopping = False
        self.hang_up = threading.Event()     # set: close every accepted connection
        self.hung_up = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while not self.stopping:
            if self.hang_up.is_set():
                for key in list(self.sel.get_map().values()):
                    if key.data is not None:
                        self.sel.unregister(key.fileobj)
                        key.fileobj.close()
                self.hang_up.clear()
                self.hung_up.set()
            for key, _ in self.sel.select(0.05):
                if key.data is None:
                    try:
                        c, _ = key.fileobj.accept()
                    except OSError:
                        continue
                    c.setblocking(False)
                    self.sel.register(c, selectors.EVENT_READ, [b""])
                    self.socks.append(c)
                    continue
                try:
                    data = key.fileobj.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    self.sel.unregister(key.fileobj)
                    key.fileobj.close()
                    continue
                key.data[0] += data
                while b"\r\n\r\n" in key.data[0]:
                    key.data[0] = key.data[0].split(b"\r\n\r\n", 1)[1]
                    key.fileobj.sendall(RESPONSE)

    def close_connections(self, timeout=10):
        """Close every connection accepted so far (from the loop's thread);
        the listening sockets stay."""
        self.hung_up.clear()
        self.hang_up.set()
        if not self.hung_up.wait(timeout):
            raise AssertionError("the upstreams did not close their connections")

    def stop(self):
        self.stopping = True
        self.thread.join(5)
        for s in self.socks:
            s.close()
