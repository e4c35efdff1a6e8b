"""gloo's transport devices, as collie understands them.

gloo programs name the network interface (or the host name whose address to bind) of a
process group with ``ProcessGroupGloo.create_device(interface=..., hostname=...)`` and
put the devices into the group's options. collie's sockets pick their interface with
the ``COLLIE_SOCKET_IFNAME`` knob, so a device here is that interface, checked when the
device is made::

    dev = torch_collie.create_device(interface="eth0")
    dist.new_group(backend="collie", pg_options=dev.knobs())

``create_device`` is also a static method of collie's backend type, where gloo code
calls it (``group._get_backend(torch.device("cpu")).create_device(...)``).
"""

import fcntl
import ipaddress
import socket
import struct

_SIOCGIFADDR = 0x8915


class Device:
    """A network interface for collie's sockets (what create_device returns)."""

    def __init__(self, interface, hostname=""):
        self.interface = interface
        self.hostname = hostname

    def knobs(self):
        """The group's collie knobs for this device: its interface, matched exactly."""
        return {"COLLIE_SOCKET_IFNAME": "=" + self.interface}

    def __repr__(self):
        via = f", hostname={self.hostname!r}" if self.hostname else ""
        return f"torch_collie.Device(interface={self.interface!r}{via})"


def _ipv4_of(interface):
    """The interface's IPv4 address, or None when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("256s", interface.encode()[:15])
        try:
            reply = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, request)
        except OSError:
            return None
    return ipaddress.ip_address(socket.inet_ntoa(reply[20:24]))


def _interface_holding(addresses):
    for _, name in socket.if_nameindex():
        address = _ipv4_of(name)
        if address is not None and address in addresses:
            return name
    return None


def create_device(interface="", hostname="", lazy_init=None):
    """A Device for ``interface``, else for the local interface that holds ``hostname``'s
    address (default: this host's name), as gloo's create_device chooses. Raises
    RuntimeError when the interface does not exist or no local interface holds the
    address. ``lazy_init`` is accepted for gloo's signature: collie always connects
    when the group is created."""
    del lazy_init
    if interface:
        try:
            socket.if_nametoindex(interface)
        except OSError:
            names = ", ".join(name for _, name in socket.if_nameindex())
            raise RuntimeError(
                f"torch_collie.create_device: no network interface named {interface!r} "
                f"(this host has: {names})") from None
        return Device(interface)
    name = hostname or socket.gethostname()
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET)
    except socket.gaierror as e:
        raise RuntimeError(
            f"torch_collie.create_device: cannot resolve hostname {name!r}: {e}") from None
    addresses = {ipaddress.ip_address(info[4][0]) for info in infos}
    found = _interface_holding(addresses)
    if found is None:
        listed = ", ".join(sorted(str(a) for a in addresses))
        raise RuntimeError(
            f"torch_collie.create_device: hostname {name!r} resolves to {listed}, which no "
            "local interface holds")
    return Device(found, name)


def device_knobs(devices):
    """The collie knobs for gloo-style ``devices`` (a list of Device, as gloo's
    options hold): every device's interface, matched exactly."""
    devices = list(devices or [])
    for d in devices:
        if not isinstance(d, Device):
            raise TypeError("torch_collie: devices must come from torch_collie.create_device, "
                            "not " + type(d).__name__)
    if not devices:
        return {}
    names = []
    for d in devices:
        if d.interface not in names:
            names.append(d.interface)
    return {"COLLIE_SOCKET_IFNAME": "=" + ",".join(names)}
