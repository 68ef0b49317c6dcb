#!/usr/bin/python3
"""The management service over gRPC, from Python.

Any gRPC client can use the service: this one generates its stubs from
proto/lode/mgmt/v1/mgmt.proto at test time (grpc_tools), starts mgmt_host
(src/mgmt/tests/mgmt_host.c: the service with two fake targets), reads the
administrator's credentials file the first start writes, and goes through
sessions, pools, containers, tenants, users, groups, ACLs, revocation,
renewal, key rotation, a malformed request, a restart on the same state
directory and a damaged state file.

    /usr/bin/python3 tests/mgmt/mgmt_test.py --host build/bin/mgmt_host

Prints each check; exits 1 if any failed. Needs Debian's python3-grpcio and
grpc_tools (run it with /usr/bin/python3, not a pyenv without them).
"""
import argparse
import os
import select
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time

import grpc

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CAP_SIZE = 104
R_READ, R_WRITE, R_ADMIN = 1, 2, 4
GIB = 1 << 30

failures = 0
checks = 0


def check(cond, what):
    global failures, checks
    checks += 1
    if cond:
        print("ok   " + what)
    else:
        failures += 1
        print("FAIL " + what)
    return cond


def code_of(fn, *args, **kw):
    """Call fn; return (status code, reply or None, details)."""
    try:
        return grpc.StatusCode.OK, fn(*args, **kw), ""
    except grpc.RpcError as e:
        return e.code(), None, e.details() or ""


def expect(code, what, fn, *args, **kw):
    got, reply, details = code_of(fn, *args, **kw)
    check(got == code, "%s -> %s (got %s%s)" % (what, code.name, got.name,
                                                ": " + details if details else ""))
    return reply


def gen_stubs(out):
    os.makedirs(out)
    subprocess.check_call([sys.executable, "-m", "grpc_tools.protoc", "-I" + REPO + "/proto",
                           "--python_out=" + out, "--grpc_python_out=" + out,
                           REPO + "/proto/lode/mgmt/v1/mgmt.proto"])
    sys.path.insert(0, out)
    from lode.mgmt.v1 import mgmt_pb2, mgmt_pb2_grpc  # noqa: E402
    return mgmt_pb2, mgmt_pb2_grpc


hosts = []  # every mgmt_host started, killed at the end whatever happened


class Host:
    """mgmt_host on a free port; stop() sends SIGTERM and wants exit 0."""

    def __init__(self, exe, state_dir, cred, extra=()):
        self.p = subprocess.Popen([exe, "--listen", "127.0.0.1:0", "--state-dir", state_dir,
                                   "--admin-cred", cred] + list(extra),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        hosts.append(self.p)
        ready, _, _ = select.select([self.p.stdout], [], [], 30)
        line = self.p.stdout.readline().decode() if ready else ""
        if not line.startswith("port "):
            self.p.kill()
            _, err = self.p.communicate()
            raise RuntimeError("mgmt_host did not start: %r %s" % (line, err.decode()))
        self.port = int(line.split()[1])
        self.addr = "127.0.0.1:%d" % self.port

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            _, err = self.p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.communicate()
            return check(False, "mgmt_host stops on SIGTERM")
        sys.stderr.write(err.decode())
        return check(self.p.returncode == 0, "mgmt_host exits 0 on SIGTERM")


def read_cred(path):
    kv = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            k, _, v = line.partition(":")
            kv[k.strip()] = v.strip()
    return kv


def md(cap):
    return [("lode-cap-bin", cap)]


def key_id(cap):
    return struct.unpack_from("<I", cap, 4)[0]


def run(args, pb, pbg, tmp):
    state_dir = os.path.join(tmp, "state")
    cred_path = os.path.join(tmp, "cred", "admin.credentials")
    host = Host(args.host, state_dir, cred_path)

    # ---- first start: the credentials file --------------------------------
    st = os.stat(cred_path)
    check(stat.S_IMODE(st.st_mode) == 0o600, "credentials file is mode 0600")
    check(stat.S_IMODE(os.stat(os.path.join(state_dir, "state.pb")).st_mode) == 0o600,
          "state.pb is mode 0600")
    cred = read_cred(cred_path)
    check(cred.get("user") == "admin", "credentials name user admin")
    check(len(cred.get("secret", "")) == 64, "credentials hold a 64-hex-digit secret")
    check(cred.get("mgmt") == host.addr, "credentials name the bound address %s" % host.addr)

    ch = grpc.insecure_channel(host.addr)
    mg = pbg.MgmtStub(ch)
    T = 10

    # ---- sessions ----------------------------------------------------------
    r = expect(grpc.StatusCode.OK, "Connect as admin", mg.Connect,
               pb.ConnectRequest(user="admin", secret=cred["secret"].encode()), timeout=T)
    root = r.capability
    check(len(root) == CAP_SIZE, "capability is %d bytes" % CAP_SIZE)
    check(len(r.pool_uuid) == 16, "pool uuid is 16 bytes")
    check(r.tenant == "system" and r.user == "admin", "Connect names tenant and user")
    check(r.expires_unix_ms > time.time() * 1000, "capability expires in the future")
    check(len(r.map.engines) == 1 and r.map.engines[0].address == "127.0.0.1:9999" and
          [t.id for t in r.map.engines[0].targets] == [0, 1],
          "pool map: engine 0 with its address and targets 0, 1")
    check(list(r.pool_targets) == [0, 1], "default pool spans both targets")
    check(len(r.mgmt_replicas) == 0, "an unreplicated service names no replicas")
    _, _, d1 = code_of(mg.Connect, pb.ConnectRequest(user="admin", secret=b"wrong"), timeout=T)
    _, _, d2 = code_of(mg.Connect, pb.ConnectRequest(user="nobody", secret=b"wrong"), timeout=T)
    expect(grpc.StatusCode.UNAUTHENTICATED, "Connect with a wrong secret", mg.Connect,
           pb.ConnectRequest(user="admin", secret=b"wrong"), timeout=T)
    expect(grpc.StatusCode.UNAUTHENTICATED, "Connect as an unknown user", mg.Connect,
           pb.ConnectRequest(user="nobody", secret=b"wrong"), timeout=T)
    check(d1 == d2, "wrong user and wrong secret read the same (%r)" % d1)
    expect(grpc.StatusCode.NOT_FOUND, "Connect to a pool that does not exist", mg.Connect,
           pb.ConnectRequest(user="admin", secret=cred["secret"].encode(), pool="nope"),
           timeout=T)
    expect(grpc.StatusCode.UNAUTHENTICATED, "PoolListAll without a capability",
           mg.PoolListAll, pb.Empty(), timeout=T)
    forged = bytearray(root)
    forged[2] |= R_ADMIN
    forged[30] ^= 1
    expect(grpc.StatusCode.UNAUTHENTICATED, "PoolListAll with a forged capability",
           mg.PoolListAll, pb.Empty(), metadata=md(bytes(forged)), timeout=T)
    expect(grpc.StatusCode.UNAUTHENTICATED, "PoolListAll with 3 bytes of capability",
           mg.PoolListAll, pb.Empty(), metadata=md(b"abc"), timeout=T)

    # ---- pools -------------------------------------------------------------
    p = expect(grpc.StatusCode.OK, "PoolCreate p1 (1 GiB on target 0)", mg.PoolCreate,
               pb.PoolCreateRequest(label="p1", size=GIB, targets=[0]), metadata=md(root),
               timeout=T)
    check(p is not None and p.label == "p1" and list(p.targets) == [0] and len(p.uuid) == 16,
          "PoolCreate returns the pool")
    lst = expect(grpc.StatusCode.OK, "PoolListAll", mg.PoolListAll, pb.Empty(),
                 metadata=md(root), timeout=T)
    check(lst is not None and sorted(x.label for x in lst.pools) == ["default", "p1"],
          "PoolListAll shows default and p1")
    q = expect(grpc.StatusCode.OK, "PoolQuery p1", mg.PoolQuery, pb.PoolRef(label="p1"),
               metadata=md(root), timeout=T)
    check(q is not None and q.size == GIB and q.containers == 0, "PoolQuery: size, no containers")
    expect(grpc.StatusCode.RESOURCE_EXHAUSTED, "PoolCreate over the targets' capacity",
           mg.PoolCreate, pb.PoolCreateRequest(label="huge", size=3 * GIB), metadata=md(root),
           timeout=T)
    expect(grpc.StatusCode.INVALID_ARGUMENT, "PoolCreate with a bad label", mg.PoolCreate,
           pb.PoolCreateRequest(label="no way"), metadata=md(root), timeout=T)
    expect(grpc.StatusCode.INVALID_ARGUMENT, "PoolCreate on target 9", mg.PoolCreate,
           pb.PoolCreateRequest(label="p9", targets=[9]), metadata=md(root), timeout=T)
    expect(grpc.StatusCode.ALREADY_EXISTS, "PoolCreate p1 again", mg.PoolCreate,
           pb.PoolCreateRequest(label="p1"), metadata=md(root), timeout=T)
    expect(grpc.StatusCode.OK, "PoolDestroy p1", mg.PoolDestroy,
           pb.PoolDestroyRequest(label="p1"), metadata=md(root), timeout=T)
    expect(grpc.StatusCode.NOT_FOUND, "PoolQuery p1 after destroy", mg.PoolQuery,
           pb.PoolRef(label="p1"), metadata=md(root), timeout=T)

    # ---- tenants, users, groups, ACLs -----------------------------------------
    for t in ("acme", "beta"):
        expect(grpc.StatusCode.OK, "TenantCreate " + t, mg.TenantCreate, pb.NameRef(name=t),
               metadata=md(root), timeout=T)
    for tenant, name, secret, admin in (("acme", "admin", b"acme-admin", True),
                                        ("acme", "bob", b"bob-secret", False),
                                        ("beta", "eve", b"eve-secret", False)):
        expect(grpc.StatusCode.OK, "UserCreate %s/%s" % (tenant, name), mg.UserCreate,
               pb.UserCreateRequest(tenant=tenant, name=name, secret=secret, admin=admin),
               metadata=md(root), timeout=T)
    for t in ("acme", "beta"):
        expect(grpc.StatusCode.OK, "AclSet default tenant:%s READ|WRITE" % t, mg.AclSet,
               pb.AclEntry(resource="default", principal="tenant:" + t, rights=R_READ | R_WRITE),
               metadata=md(root), timeout=T)
    tl = expect(grpc.StatusCode.OK, "TenantListAll", mg.TenantListAll, pb.Empty(),
                metadata=md(root), timeout=T)
    check(tl is not None and sorted(t.name for t in tl.tenants) == ["acme", "beta", "system"],
          "TenantListAll shows acme, beta, system")

    def connect(user, secret):
        r = mg.Connect(pb.ConnectRequest(user=user, secret=secret), timeout=T)
        return r.capability

    acme_admin = connect("acme/admin", b"acme-admin")
    bob = connect("acme/bob", b"bob-secret")
    eve = connect("beta/eve", b"eve-secret")
    expect(grpc.StatusCode.PERMISSION_DENIED, "bob creates a pool", mg.PoolCreate,
           pb.PoolCreateRequest(label="bobs"), metadata=md(bob), timeout=T)
    expect(grpc.StatusCode.PERMISSION_DENIED, "acme's admin creates a user in beta",
           mg.UserCreate, pb.UserCreateRequest(tenant="beta", name="x", secret=b"x"),
           metadata=md(acme_admin), timeout=T)
    expect(grpc.StatusCode.OK, "acme's admin creates acme/carol", mg.UserCreate,
           pb.UserCreateRequest(name="carol", secret=b"carol-secret"), metadata=md(acme_admin),
           timeout=T)
    expect(grpc.StatusCode.OK, "GroupCreate acme/dev", mg.GroupCreate,
           pb.GroupCreateRequest(name="dev"), metadata=md(acme_admin), timeout=T)
    g = expect(grpc.StatusCode.OK, "GroupAddUser dev bob", mg.GroupAddUser,
               pb.GroupMemberRequest(group="dev", user="bob"), metadata=md(acme_admin),
               timeout=T)
    check(g is not None and list(g.members) == ["bob"], "group dev holds bob")
    ul = expect(grpc.StatusCode.OK, "UserListAll acme", mg.UserListAll, pb.NameRef(name="acme"),
                metadata=md(acme_admin), timeout=T)
    users = {u.name: u for u in ul.users} if ul else {}
    check(sorted(users) == ["admin", "bob", "carol"] and list(users["bob"].groups) == ["dev"],
          "UserListAll acme: admin, bob (in dev), carol")
    gl = expect(grpc.StatusCode.OK, "GroupListAll acme", mg.GroupListAll,
                pb.NameRef(name="acme"), metadata=md(root), timeout=T)
    check(gl is not None and [x.name for x in gl.groups] == ["dev"], "GroupListAll shows dev")
    expect(grpc.StatusCode.PERMISSION_DENIED, "bob lists acme's users", mg.UserListAll,
           pb.NameRef(), metadata=md(bob), timeout=T)

    # ---- containers --------------------------------------------------------
    ci = expect(grpc.StatusCode.OK, "bob creates default/c1 (SX, 64 KiB, no checksum)",
                mg.ContCreate,
                pb.ContCreateRequest(pool="default", label="c1",
                                     props=pb.ContProps(object_class="SX", chunk_size=65536,
                                                        checksum="none")),
                metadata=md(bob), timeout=T)
    check(ci is not None and ci.tenant == "acme" and len(ci.uuid) == 16 and
          ci.uuid != b"lode.root\0\0\0\0\0\0\x01", "c1 is acme's, with a fresh uuid")
    q = expect(grpc.StatusCode.OK, "ContQuery c1", mg.ContQuery,
               pb.ContRef(pool="default", label="c1"), metadata=md(bob), timeout=T)
    check(q is not None and q.props.object_class == "SX" and q.props.chunk_size == 65536 and
          q.props.checksum == "none" and not q.props.encryption, "c1's properties")
    for props, what in ((pb.ContProps(object_class="S129"), "object class S129"),
                        (pb.ContProps(object_class="EC_2P1", encryption=True),
                         "object class EC_2P1, encrypted (not coded yet)"),
                        (pb.ContProps(chunk_size=1000), "chunk size 1000"),
                        (pb.ContProps(chunk_size=1 << 27), "chunk size 128 MiB"),
                        (pb.ContProps(checksum="md5"), "checksum md5"),
                        (pb.ContProps(crypt_block=65536), "a crypt block, unencrypted")):
        expect(grpc.StatusCode.INVALID_ARGUMENT, "ContCreate with " + what, mg.ContCreate,
               pb.ContCreateRequest(pool="default", label="bad", props=props),
               metadata=md(bob), timeout=T)
    expect(grpc.StatusCode.ALREADY_EXISTS, "ContCreate c1 again", mg.ContCreate,
           pb.ContCreateRequest(pool="default", label="c1"), metadata=md(bob), timeout=T)
    # The data key is the client's: the service only keeps it wrapped, as sent.
    expect(grpc.StatusCode.INVALID_ARGUMENT, "encrypted ContCreate without a wrapped key",
           mg.ContCreate, pb.ContCreateRequest(pool="default", label="enc",
                                               props=pb.ContProps(encryption=True)),
           metadata=md(bob), timeout=T)
    expect(grpc.StatusCode.INVALID_ARGUMENT, "encrypted ContCreate with a 59-byte key",
           mg.ContCreate, pb.ContCreateRequest(pool="default", label="enc",
                                               props=pb.ContProps(encryption=True),
                                               wrapped_key=b"w" * 59),
           metadata=md(bob), timeout=T)
    wrapped = os.urandom(12 + 32 + 16)
    expect(grpc.StatusCode.OK, "bob creates an encrypted container", mg.ContCreate,
           pb.ContCreateRequest(pool="default", label="enc",
                                props=pb.ContProps(encryption=True), wrapped_key=wrapped),
           metadata=md(bob), timeout=T)
    q = expect(grpc.StatusCode.OK, "ContQuery enc", mg.ContQuery,
               pb.ContRef(pool="default", label="enc"), metadata=md(bob), timeout=T)
    check(q is not None and q.props.encryption and not q.wrapped_key,
          "ContQuery shows encryption, no key")
    check(q is not None and q.props.crypt_block == 4096, "enc seals in 4 KiB blocks by default")
    for cb in (4095, 6144, 2 << 20):
        expect(grpc.StatusCode.INVALID_ARGUMENT, "ContCreate with crypt block %d" % cb,
               mg.ContCreate,
               pb.ContCreateRequest(pool="default", label="enc-bad",
                                    props=pb.ContProps(encryption=True, crypt_block=cb),
                                    wrapped_key=wrapped),
               metadata=md(bob), timeout=T)
    expect(grpc.StatusCode.OK, "bob creates an encrypted container in 64 KiB blocks",
           mg.ContCreate,
           pb.ContCreateRequest(pool="default", label="enc64",
                                props=pb.ContProps(encryption=True, crypt_block=65536),
                                wrapped_key=wrapped),
           metadata=md(bob), timeout=T)
    q = expect(grpc.StatusCode.OK, "ContQuery enc64", mg.ContQuery,
               pb.ContRef(pool="default", label="enc64"), metadata=md(bob), timeout=T)
    check(q is not None and q.props.crypt_block == 65536, "enc64 keeps its 64 KiB blocks")
    o = expect(grpc.StatusCode.OK, "OpenContainer enc", mg.OpenContainer,
               pb.ContRef(pool="default", label="enc"), metadata=md(bob), timeout=T)
    check(o is not None and o.info.wrapped_key == wrapped,
          "OpenContainer hands out the wrapped data key bob sent")

    # ---- cross-tenant ------------------------------------------------------
    cl = expect(grpc.StatusCode.OK, "eve lists default", mg.ContListAll,
                pb.PoolRef(label="default"), metadata=md(eve), timeout=T)
    check(cl is not None and "c1" not in [c.label for c in cl.containers],
          "eve does not see acme's c1")
    expect(grpc.StatusCode.PERMISSION_DENIED, "eve opens c1", mg.OpenContainer,
           pb.ContRef(pool="default", label="c1"), metadata=md(eve), timeout=T)
    expect(grpc.StatusCode.PERMISSION_DENIED, "eve queries c1", mg.ContQuery,
           pb.ContRef(pool="default", label="c1"), metadata=md(eve), timeout=T)
    expect(grpc.StatusCode.PERMISSION_DENIED, "eve destroys c1", mg.ContDestroy,
           pb.ContRef(pool="default", label="c1"), metadata=md(eve), timeout=T)
    expect(grpc.StatusCode.PERMISSION_DENIED, "eve grants herself c1", mg.AclSet,
           pb.AclEntry(resource="default/c1", principal="user:eve", rights=R_READ),
           metadata=md(eve), timeout=T)
    e = expect(grpc.StatusCode.OK, "bob grants beta/eve READ on c1", mg.AclSet,
               pb.AclEntry(resource="default/c1", principal="user:beta/eve", rights=R_READ),
               metadata=md(bob), timeout=T)
    check(e is not None and e.principal == "user:beta/eve", "AclSet returns the entry")
    al = expect(grpc.StatusCode.OK, "AclGet default/c1", mg.AclGet,
                pb.NameRef(name="default/c1"), metadata=md(bob), timeout=T)
    check(al is not None and sorted((x.principal, x.rights) for x in al.entries) ==
          [("tenant:acme", 7), ("user:beta/eve", 1)], "c1's ACL: tenant:acme 7, user:beta/eve 1")
    o = expect(grpc.StatusCode.OK, "eve opens c1 after the grant", mg.OpenContainer,
               pb.ContRef(pool="default", label="c1"), metadata=md(eve), timeout=T)
    check(o is not None and o.rights == R_READ and len(o.capability) == CAP_SIZE,
          "eve's container capability carries READ only")
    check(o is not None and o.capability[24:32] == eve[24:32],
          "the container capability keeps the session's client id")

    # ---- revocation ----------------------------------------------------------
    u = expect(grpc.StatusCode.OK, "acme's admin revokes bob", mg.UserRevoke,
               pb.NameRef(name="bob"), metadata=md(acme_admin), timeout=T)
    check(u is not None and u.revoked, "bob shows revoked")
    expect(grpc.StatusCode.UNAUTHENTICATED, "revoked bob's capability", mg.PoolListAll,
           pb.Empty(), metadata=md(bob), timeout=T)
    expect(grpc.StatusCode.UNAUTHENTICATED, "revoked bob connects", mg.Connect,
           pb.ConnectRequest(user="acme/bob", secret=b"bob-secret"), timeout=T)
    expect(grpc.StatusCode.UNAUTHENTICATED, "revoked bob renews", mg.RenewCapability,
           pb.RenewRequest(capability=bob), timeout=T)
    expect(grpc.StatusCode.OK, "acme's admin restores bob", mg.UserRestore,
           pb.NameRef(name="bob"), metadata=md(acme_admin), timeout=T)
    old_bob = bob
    bob = connect("acme/bob", b"bob-secret")
    expect(grpc.StatusCode.OK, "restored bob's new session", mg.PoolListAll, pb.Empty(),
           metadata=md(bob), timeout=T)
    expect(grpc.StatusCode.UNAUTHENTICATED, "bob's token from before the revocation",
           mg.PoolListAll, pb.Empty(), metadata=md(old_bob), timeout=T)

    # ---- renewal, system, rotation --------------------------------------------------------
    time.sleep(0.01)
    rr = expect(grpc.StatusCode.OK, "RenewCapability eve", mg.RenewCapability,
                pb.RenewRequest(capability=eve), timeout=T)
    old_exp = struct.unpack_from("<q", eve, 8)[0]
    check(rr is not None and rr.expires_unix_ms > old_exp, "renewal extends the expiry")
    eve = rr.capability if rr else eve
    ss = expect(grpc.StatusCode.OK, "SystemQuery", mg.SystemQuery, pb.Empty(),
                metadata=md(eve), timeout=T)
    check(ss is not None and ss.capacity == 2 * GIB and ss.used == 4096 + 8192 and
          ss.pools == 1 and ss.containers == 3 and ss.signing_key_id == 1,
          "SystemQuery: 2 GiB, used 12 KiB, 1 pool, 3 containers, key 1")
    expect(grpc.StatusCode.PERMISSION_DENIED, "bob rotates the key", mg.RotateKey, pb.Empty(),
           metadata=md(bob), timeout=T)
    rk = expect(grpc.StatusCode.OK, "RotateKey", mg.RotateKey, pb.Empty(), metadata=md(root),
                timeout=T)
    check(rk is not None and rk.key_id == 2, "the new signing key is 2")
    expect(grpc.StatusCode.OK, "a key-1 capability still works", mg.PoolListAll, pb.Empty(),
           metadata=md(eve), timeout=T)
    rr = expect(grpc.StatusCode.OK, "RenewCapability after rotation", mg.RenewCapability,
                pb.RenewRequest(capability=eve), timeout=T)
    check(rr is not None and key_id(rr.capability) == 2, "the renewed capability uses key 2")
    eve = rr.capability if rr else eve

    # ---- malformed requests ----------------------------------------------------------
    raw = ch.unary_unary("/lode.mgmt.v1.Mgmt/PoolCreate", request_serializer=lambda x: x,
                         response_deserializer=lambda x: x)
    expect(grpc.StatusCode.INVALID_ARGUMENT, "PoolCreate with a garbage body", raw,
           b"\xff\xff\xff\xff\x0f\x12", metadata=md(root), timeout=T)
    raw = ch.unary_unary("/lode.mgmt.v1.Mgmt/Connect", request_serializer=lambda x: x,
                         response_deserializer=lambda x: x)
    expect(grpc.StatusCode.INVALID_ARGUMENT, "Connect with a truncated body", raw,
           b"\x0a\x40ad", timeout=T)
    raw = ch.unary_unary("/lode.mgmt.v1.Mgmt/NoSuchCall", request_serializer=lambda x: x,
                         response_deserializer=lambda x: x)
    expect(grpc.StatusCode.UNIMPLEMENTED, "an unknown method", raw, b"", timeout=T)
    expect(grpc.StatusCode.OK, "the service still serves", mg.SystemQuery, pb.Empty(),
           metadata=md(root), timeout=T)
    ch.close()

    # ---- restart on the same state ----------------------------------------------------
    host.stop()
    host = Host(args.host, state_dir, cred_path)
    cred2 = read_cred(cred_path)
    check(cred2.get("secret") == cred["secret"], "restart keeps the admin secret")
    check(cred2.get("mgmt") == host.addr, "restart updates the address in the credentials")
    ch = grpc.insecure_channel(host.addr)
    mg = pbg.MgmtStub(ch)
    root2 = expect(grpc.StatusCode.OK, "Connect as admin after restart", mg.Connect,
                   pb.ConnectRequest(user="admin", secret=cred["secret"].encode()), timeout=T)
    root2 = root2.capability if root2 else root
    check(key_id(root2) == 2, "signing key 2 after restart")
    expect(grpc.StatusCode.OK, "eve's capability from before the restart", mg.PoolListAll,
           pb.Empty(), metadata=md(eve), timeout=T)
    expect(grpc.StatusCode.OK, "root's key-1 capability from before the restart",
           mg.PoolListAll, pb.Empty(), metadata=md(root), timeout=T)
    expect(grpc.StatusCode.UNAUTHENTICATED, "bob's revoked token after the restart",
           mg.PoolListAll, pb.Empty(), metadata=md(old_bob), timeout=T)
    q = expect(grpc.StatusCode.OK, "ContQuery c1 after restart", mg.ContQuery,
               pb.ContRef(pool="default", label="c1"), metadata=md(eve), timeout=T)
    check(q is not None and q.props.object_class == "SX" and q.props.chunk_size == 65536,
          "c1's properties survived")
    tl = expect(grpc.StatusCode.OK, "TenantListAll after restart", mg.TenantListAll, pb.Empty(),
                metadata=md(root2), timeout=T)
    check(tl is not None and len(tl.tenants) == 3, "three tenants survived")
    gl = expect(grpc.StatusCode.OK, "GroupListAll acme after restart", mg.GroupListAll,
                pb.NameRef(name="acme"), metadata=md(root2), timeout=T)
    check(gl is not None and [list(x.members) for x in gl.groups] == [["bob"]],
          "group dev and its member survived")
    connect("acme/carol", b"carol-secret")
    check(True, "carol's secret survived")
    ch.close()
    host.stop()

    # ---- a damaged state file -----------------------------------------------------------
    with open(os.path.join(state_dir, "state.pb"), "r+b") as f:
        f.seek(0)
        f.write(b"\xff\xff\xff\xff\xff")
    p = subprocess.run([args.host, "--listen", "127.0.0.1:0", "--state-dir", state_dir,
                        "--admin-cred", cred_path], capture_output=True, timeout=60)
    check(p.returncode != 0 and b"port" not in p.stdout,
          "a damaged state file stops the start (%s)" % p.stderr.decode().strip())
    check(read_cred(cred_path).get("secret") == cred["secret"],
          "and the credentials are left alone")


def run_rotation_timer(args, pb, pbg, tmp):
    """--key-rotate 1: the key changes every second on its own; old tokens keep working."""
    state_dir = os.path.join(tmp, "state-rotate")
    cred_path = os.path.join(tmp, "rotate.credentials")
    host = Host(args.host, state_dir, cred_path, ["--key-rotate", "1"])
    cred = read_cred(cred_path)
    ch = grpc.insecure_channel(host.addr)
    mg = pbg.MgmtStub(ch)
    cap = mg.Connect(pb.ConnectRequest(user="admin", secret=cred["secret"].encode()),
                     timeout=10).capability
    time.sleep(2.5)
    ss = expect(grpc.StatusCode.OK, "SystemQuery 2.5 s later with a token of the first key",
                mg.SystemQuery, pb.Empty(), metadata=md(cap), timeout=10)
    check(ss is not None and ss.signing_key_id >= key_id(cap) + 2,
          "the timer rotated the key (%d -> %d)" % (key_id(cap), ss.signing_key_id if ss else 0))
    ch.close()
    host.stop()


def run_tls(args, pb, pbg, tmp):
    """With a certificate and key: TLS clients get in, plaintext ones do not."""
    if not shutil.which("openssl"):
        check(True, "TLS skipped: no openssl to make a certificate")
        return
    cert, key = os.path.join(tmp, "tls.pem"), os.path.join(tmp, "tls.key")
    subprocess.check_call(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                           "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=localhost",
                           "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state_dir = os.path.join(tmp, "state-tls")
    cred_path = os.path.join(tmp, "tls.credentials")
    host = Host(args.host, state_dir, cred_path, ["--tls-cert", cert, "--tls-key", key])
    cred = read_cred(cred_path)
    with open(cert, "rb") as f:
        creds = grpc.ssl_channel_credentials(root_certificates=f.read())
    ch = grpc.secure_channel(host.addr, creds)
    expect(grpc.StatusCode.OK, "Connect over TLS", pbg.MgmtStub(ch).Connect,
           pb.ConnectRequest(user="admin", secret=cred["secret"].encode()), timeout=10)
    ch.close()
    ch = grpc.insecure_channel(host.addr)
    got, _, details = code_of(pbg.MgmtStub(ch).Connect,
                              pb.ConnectRequest(user="admin", secret=cred["secret"].encode()),
                              timeout=5)
    check(got != grpc.StatusCode.OK, "plaintext to the TLS endpoint is refused (%s)" % got.name)
    ch.close()
    host.stop()


def run_first_start_failure(args, tmp):
    """A first start that cannot listen leaves no state behind (else the admin
    secret, never written out, would be lost for good)."""
    import socket
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    state_dir = os.path.join(tmp, "state-busy")
    cred_path = os.path.join(tmp, "busy.credentials")
    p = subprocess.run([args.host, "--listen", "127.0.0.1:%d" % busy.getsockname()[1],
                        "--state-dir", state_dir, "--admin-cred", cred_path],
                       capture_output=True, timeout=60)
    busy.close()
    check(p.returncode != 0, "a first start on a taken port fails (%s)" %
          p.stderr.decode().strip())
    check(not os.path.exists(os.path.join(state_dir, "state.pb")),
          "and leaves no state, so the next start is a first start again")
    check(not os.path.exists(cred_path), "and writes no credentials")


def run_pool_map(args, pb, pbg, tmp):
    """The pool map over the network: an engine joins as a node user,
    heartbeats, is read back with PoolMapGet (a container capability will
    do), excluded and reintegrated with EngineSetState, and marked DOWN by
    the service once it falls silent."""
    state_dir = os.path.join(tmp, "state-map")
    cred_path = os.path.join(tmp, "cred-map", "admin.credentials")
    host = Host(args.host, state_dir, cred_path, ["--heartbeat-ms", "200", "--grace-ms", "600"])
    cred = read_cred(cred_path)
    ch = grpc.insecure_channel(host.addr)
    mg = pbg.MgmtStub(ch)
    T = 10
    root = mg.Connect(pb.ConnectRequest(user="admin", secret=cred["secret"].encode()),
                      timeout=T).capability
    expect(grpc.StatusCode.OK, "UserCreate node (a node user of system)", mg.UserCreate,
           pb.UserCreateRequest(name="node", secret=b"node-secret", node=True),
           metadata=md(root), timeout=T)
    expect(grpc.StatusCode.OK, "UserCreate plain", mg.UserCreate,
           pb.UserCreateRequest(name="plain", secret=b"plain-secret"), metadata=md(root),
           timeout=T)
    node = mg.Connect(pb.ConnectRequest(user="node", secret=b"node-secret"),
                      timeout=T).capability
    plain = mg.Connect(pb.ConnectRequest(user="plain", secret=b"plain-secret"),
                       timeout=T).capability
    uuid = bytes(range(1, 17))
    m0 = expect(grpc.StatusCode.OK, "PoolMapGet", mg.PoolMapGet, pb.Empty(), metadata=md(root),
                timeout=T)
    check(m0 is not None and len(m0.engines) == 1 and m0.engines[0].state == pb.STATE_UP and
          m0.heartbeat_ms == 200 and m0.grace_ms == 600,
          "the map: the host engine UP, heartbeat 200 ms, grace 600 ms")
    expect(grpc.StatusCode.PERMISSION_DENIED, "EngineJoin as a plain user", mg.EngineJoin,
           pb.EngineJoinRequest(uuid=uuid, address="127.0.0.1:7001", ntargets=2),
           metadata=md(plain), timeout=T)
    expect(grpc.StatusCode.INVALID_ARGUMENT, "EngineJoin without a port", mg.EngineJoin,
           pb.EngineJoinRequest(uuid=uuid, address="127.0.0.1", ntargets=2),
           metadata=md(node), timeout=T)
    j = expect(grpc.StatusCode.OK, "EngineJoin as the node user", mg.EngineJoin,
               pb.EngineJoinRequest(uuid=uuid, address="127.0.0.1:7001", ntargets=2),
               metadata=md(node), timeout=T)
    check(j is not None and j.engine_id == 1 and len(j.map.engines) == 2 and
          j.map.engines[1].state == pb.STATE_UP and j.map.version == m0.version + 1,
          "joined as engine 1, UP (no container yet), one version later")
    check(j is not None and len(j.keys) >= 1 and len(j.keys[-1].key) == 32 and
          j.keys[-1].retired_unix_ms == 0, "the join reply carries the signing key")
    hb = expect(grpc.StatusCode.OK, "EngineHeartbeat", mg.EngineHeartbeat,
                pb.HeartbeatRequest(engine_id=1, uuid=uuid, map_version=j.map.version,
                                    targets=[pb.Target(id=0, capacity=GIB, used=4096)]),
                metadata=md(node), timeout=T)
    check(hb is not None and not hb.HasField("map") and len(hb.keys) >= 1 and
          hb.heartbeat_ms == 200 and hb.grace_ms == 600,
          "an engine holding the current map gets the keys, heartbeat and grace, and no map")
    hb = expect(grpc.StatusCode.OK, "EngineHeartbeat from a map behind", mg.EngineHeartbeat,
                pb.HeartbeatRequest(engine_id=1, uuid=uuid, map_version=m0.version,
                                    targets=[pb.Target(id=0, capacity=GIB, used=4096)]),
                metadata=md(node), timeout=T)
    check(hb is not None and hb.HasField("map") and hb.map.version == j.map.version and
          hb.map.engines[1].heartbeat_unix_ms > 0 and
          hb.map.engines[1].targets[0].capacity == GIB,
          "the heartbeat is recorded with its targets' numbers")
    expect(grpc.StatusCode.NOT_FOUND, "EngineHeartbeat with another uuid", mg.EngineHeartbeat,
           pb.HeartbeatRequest(engine_id=1, uuid=bytes(16 * [9])), metadata=md(node),
           timeout=T)
    # A container capability may read the map.
    expect(grpc.StatusCode.OK, "ContCreate c1", mg.ContCreate,
           pb.ContCreateRequest(pool="default", label="c1"), metadata=md(root), timeout=T)
    oc = mg.OpenContainer(pb.ContRef(pool="default", label="c1"), metadata=md(root), timeout=T)
    mc = expect(grpc.StatusCode.OK, "PoolMapGet with a container capability", mg.PoolMapGet,
                pb.Empty(), metadata=md(oc.capability), timeout=T)
    check(mc is not None and len(mc.engines) == 2, "both engines in the map")
    e = expect(grpc.StatusCode.FAILED_PRECONDITION, "EngineSetState DOWN of the host",
               mg.EngineSetState, pb.EngineStateRequest(engine_id=0, state=pb.STATE_DOWN),
               metadata=md(root), timeout=T)
    expect(grpc.StatusCode.PERMISSION_DENIED, "EngineSetState as the node user",
           mg.EngineSetState, pb.EngineStateRequest(engine_id=1, state=pb.STATE_DOWN),
           metadata=md(node), timeout=T)
    e = expect(grpc.StatusCode.OK, "EngineSetState DOWN of engine 1", mg.EngineSetState,
               pb.EngineStateRequest(engine_id=1, state=pb.STATE_DOWN), metadata=md(root),
               timeout=T)
    check(e is not None and e.id == 1 and e.state == pb.STATE_DOWN, "engine 1 is DOWN")
    q = expect(grpc.StatusCode.OK, "PoolQuery default", mg.PoolQuery,
               pb.PoolRef(label="default"), metadata=md(root), timeout=T)
    check(q is not None and len(q.map.engines) == 2 and q.rebuild.map_version >= 1,
          "PoolQuery carries the map and the rebuild status")
    # The host has nothing to rebuild: the next check declares engine 1 OUT.
    deadline = time.time() + 5
    while time.time() < deadline:
        mm = mg.PoolMapGet(pb.Empty(), metadata=md(root), timeout=T)
        if mm.engines[1].state == pb.STATE_OUT:
            break
        time.sleep(0.1)
    check(mm.engines[1].state == pb.STATE_OUT, "rebuild done: engine 1 OUT")
    # Reintegrating an OUT engine: its record stays OUT without its address,
    # and the engine, refused at its next heartbeat, joins again as engine 2
    # (NEW: a container exists) at the same address.
    e = expect(grpc.StatusCode.OK, "EngineSetState UP (reintegrate)", mg.EngineSetState,
               pb.EngineStateRequest(engine_id=1, state=pb.STATE_UP), metadata=md(root),
               timeout=T)
    check(e is not None and e.state == pb.STATE_OUT and e.address == "",
          "the reintegrated OUT engine's record stays OUT, without its address")
    expect(grpc.StatusCode.NOT_FOUND, "its next heartbeat is refused", mg.EngineHeartbeat,
           pb.HeartbeatRequest(engine_id=1, uuid=uuid), metadata=md(node), timeout=T)
    j2 = expect(grpc.StatusCode.OK, "it joins again", mg.EngineJoin,
                pb.EngineJoinRequest(uuid=uuid, address="127.0.0.1:7001", ntargets=2),
                metadata=md(node), timeout=T)
    check(j2 is not None and j2.engine_id == 2 and j2.map.engines[2].state == pb.STATE_NEW,
          "as engine 2, NEW")
    v = mg.PoolMapGet(pb.Empty(), metadata=md(root), timeout=T).version
    # Silent past grace: a NEW engine is forgotten without anyone asking.
    time.sleep(1.5)
    mm = mg.PoolMapGet(pb.Empty(), metadata=md(root), timeout=T)
    check(len(mm.engines) == 2 and mm.version > v,
          "a silent NEW engine is removed by the service (version %d -> %d)" % (v, mm.version))
    ch.close()
    # The map survives a restart.
    host.stop()
    host = Host(args.host, state_dir, cred_path, ["--heartbeat-ms", "200", "--grace-ms", "600"])
    ch = grpc.insecure_channel(host.addr)
    mg = pbg.MgmtStub(ch)
    m2 = expect(grpc.StatusCode.OK, "PoolMapGet after restart", mg.PoolMapGet, pb.Empty(),
                metadata=md(root), timeout=T)
    check(m2 is not None and m2.version >= mm.version and len(m2.engines) == 2 and
          m2.engines[1].address == "" and m2.engines[1].state == pb.STATE_OUT,
          "the map came back: engines, the retired record, a version not lower")
    ch.close()
    host.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", required=True, help="the mgmt_host program")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    base = os.environ.get("LODE_TEST_TMP")
    if base:
        os.makedirs(base, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="mgmt_test.", dir=base)
    try:
        pb, pbg = gen_stubs(os.path.join(tmp, "stubs"))
        run(args, pb, pbg, tmp)
        run_rotation_timer(args, pb, pbg, tmp)
        run_pool_map(args, pb, pbg, tmp)
        run_tls(args, pb, pbg, tmp)
        run_first_start_failure(args, tmp)
    except Exception as e:  # a crash is a failure too, with its story
        import traceback
        traceback.print_exc()
        check(False, "no exception (%s)" % e)
    finally:
        for h in hosts:
            if h.poll() is None:
                h.kill()
                h.wait()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print("%d checks, %d failed" % (checks, failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
