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
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while not self.stopping:
            for key, _ in self.sel.select(0.2):
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

    def stop(self):
        self.stopping = True
        self.thread.join(5)
        for s in self.socks:
            s.close()
