// JgBench: throughput and self-delivery latency of JGroups' SEQUENCER
// (total order) for the peer measurements of issue 4. Built against
// Debian's libjgroups-java (2.12.2), run with the stock sequencer.xml from
// the jar. One JVM per member; run-jgroups drives the members through
// their stdin, one command per line, and reads one result line per command
// from their stdout:
//
//   tput PHASE SENDERS START WARM DUR   SENDERS a comma list of indexes;
//       every sender sends as fast as JChannel.send returns (MFC/UFC flow
//       control blocks it) until START+WARM+DUR (wall clock, shared by all
//       namespaces); deliveries from all senders inside [START+WARM,
//       START+WARM+DUR] are counted.
//   lat PHASE SENDER START ROUNDS WARMROUNDS   from START, SENDER keeps one
//       message in flight: send, wait for its own delivery, record.
//   quit
//
// Each phase ends when every member has delivered an END message from
// every sender of the phase. Every member hashes the (sender, seq) sequence
// it delivers (FNV-1a); equal hashes show the same order everywhere.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.util.Arrays;

import org.jgroups.JChannel;
import org.jgroups.Message;
import org.jgroups.ReceiverAdapter;
import org.jgroups.View;

public class JgBench extends ReceiverAdapter {
    static final int MAGIC = 0x72626a67; // "rbjg"
    static final int HDR = 24; // magic, sender, phase, end, seq

    final int me, members, size;
    volatile int viewSize;

    // Per-phase state, guarded by this.
    int phase;
    long hash, delivered, window, bad, ownDelivered;
    int endsSeen;
    boolean[] endFrom = new boolean[64];
    double winLo, winHi;

    JgBench(int me, int members, int size) {
        this.me = me;
        this.members = members;
        this.size = size;
    }

    static double now() {
        return System.currentTimeMillis() / 1e3;
    }

    @Override
    public void viewAccepted(View v) {
        viewSize = v.size();
    }

    void fnv(long v, int bytes) {
        for (int i = 0; i < bytes; i++) {
            hash ^= (v >>> (8 * i)) & 0xff;
            hash *= 1099511628211L;
        }
    }

    @Override
    public synchronized void receive(Message m) {
        byte[] raw = m.getRawBuffer();
        int len = m.getLength();
        if (raw == null || len < HDR) {
            bad++;
            return;
        }
        ByteBuffer b = ByteBuffer.wrap(raw, m.getOffset(), len);
        int magic = b.getInt(), sender = b.getInt(), ph = b.getInt(), end = b.getInt();
        long seq = b.getLong();
        if (magic != MAGIC || sender < 0 || sender >= endFrom.length || ph != phase) {
            bad++;
            return;
        }
        fnv(sender, 4);
        fnv(seq, 8);
        if (end != 0) {
            if (!endFrom[sender]) {
                endFrom[sender] = true;
                endsSeen++;
            }
            notifyAll();
            return;
        }
        if (len != size) bad++;
        delivered++;
        double t = now();
        if (t >= winLo && t < winHi) window++;
        if (sender == me) {
            ownDelivered = seq;
            notifyAll();
        }
    }

    synchronized void reset(int ph, double lo, double hi) {
        phase = ph;
        hash = 0xcbf29ce484222325L;
        delivered = window = bad = ownDelivered = 0;
        endsSeen = 0;
        Arrays.fill(endFrom, false);
        winLo = lo;
        winHi = hi;
    }

    byte[] msg(int ph, long seq, boolean end) {
        byte[] buf = new byte[end ? HDR : size];
        ByteBuffer b = ByteBuffer.wrap(buf);
        b.putInt(MAGIC).putInt(me).putInt(ph).putInt(end ? 1 : 0).putLong(seq);
        return buf;
    }

    static void sleepUntil(double t) throws InterruptedException {
        for (double d; (d = t - now()) > 0; ) Thread.sleep(Math.max(1, (long) (d * 1e3)));
    }

    synchronized void awaitEnds(int n) throws InterruptedException {
        long deadline = System.currentTimeMillis() + 60000;
        while (endsSeen < n) {
            long left = deadline - System.currentTimeMillis();
            if (left <= 0) throw new IllegalStateException("saw END from " + endsSeen + " of " + n + " senders after 60 s");
            wait(left);
        }
    }

    public static void main(String[] a) throws Exception {
        if (a.length != 4) {
            System.err.println("usage: JgBench INDEX MEMBERS BYTES STACK.xml  (commands on stdin)");
            System.exit(2);
        }
        int me = Integer.parseInt(a[0]), members = Integer.parseInt(a[1]), size = Integer.parseInt(a[2]);
        JgBench jb = new JgBench(me, members, size);
        JChannel ch = new JChannel(a[3]);
        ch.setReceiver(jb);
        ch.connect("rbfbench");
        long deadline = System.currentTimeMillis() + 60000;
        while (jb.viewSize < members) {
            if (System.currentTimeMillis() > deadline) throw new IllegalStateException("view has " + jb.viewSize + " of " + members + " members after 60 s");
            Thread.sleep(20);
        }
        boolean coord = ch.getView().getMembers().get(0).equals(ch.getAddress());
        System.out.println("ready member=" + me + " coord=" + (coord ? 1 : 0) + " view=" + ch.getView());
        System.out.flush();

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line; (line = in.readLine()) != null; ) {
            String[] f = line.trim().split("\\s+");
            if (f[0].equals("quit")) break;
            int ph = Integer.parseInt(f[1]);
            if (f[0].equals("tput")) {
                int[] senders = Arrays.stream(f[2].split(",")).mapToInt(Integer::parseInt).toArray();
                double start = Double.parseDouble(f[3]), warm = Double.parseDouble(f[4]), dur = Double.parseDouble(f[5]);
                boolean sending = Arrays.stream(senders).anyMatch(s -> s == me);
                jb.reset(ph, start + warm, start + warm + dur);
                sleepUntil(start);
                long seq = 0;
                if (sending) {
                    double end = start + warm + dur;
                    while (now() < end) ch.send(new Message(null, null, jb.msg(ph, ++seq, false)));
                    ch.send(new Message(null, null, jb.msg(ph, ++seq, true)));
                }
                jb.awaitEnds(senders.length);
                synchronized (jb) {
                    System.out.printf("member=%d mode=tput window_s=%.3f delivered_window=%d msgs_per_s=%.0f sent=%d delivered=%d hash=%016x bad=%d%n",
                            me, dur, jb.window, jb.window / dur, Math.max(0, seq - 1), jb.delivered, jb.hash, jb.bad);
                }
            } else if (f[0].equals("lat")) {
                int sender = Integer.parseInt(f[2]);
                double start = Double.parseDouble(f[3]);
                int rounds = Integer.parseInt(f[4]), warmRounds = Integer.parseInt(f[5]);
                jb.reset(ph, 0, 0);
                sleepUntil(start);
                if (sender == me) {
                    double[] lat = new double[rounds];
                    long seq = 0;
                    for (int r = 0; r < warmRounds + rounds; r++) {
                        long s = ++seq;
                        long t0 = System.nanoTime();
                        ch.send(new Message(null, null, jb.msg(ph, s, false)));
                        synchronized (jb) {
                            while (jb.ownDelivered != s) jb.wait(1000);
                        }
                        if (r >= warmRounds) lat[r - warmRounds] = (System.nanoTime() - t0) / 1e3;
                    }
                    ch.send(new Message(null, null, jb.msg(ph, ++seq, true)));
                    jb.awaitEnds(1);
                    Arrays.sort(lat);
                    synchronized (jb) {
                        System.out.printf("member=%d mode=lat rounds=%d p50_us=%.1f p99_us=%.1f min_us=%.1f max_us=%.1f delivered=%d hash=%016x bad=%d%n",
                                me, rounds, lat[rounds / 2], lat[rounds * 99 / 100], lat[0], lat[rounds - 1], jb.delivered, jb.hash, jb.bad);
                    }
                } else {
                    jb.awaitEnds(1);
                    synchronized (jb) {
                        System.out.printf("member=%d mode=lat delivered=%d hash=%016x bad=%d%n", me, jb.delivered, jb.hash, jb.bad);
                    }
                }
            } else {
                throw new IllegalArgumentException("unknown command: " + line);
            }
            System.out.flush();
        }
        ch.close();
        System.exit(0);
    }
}
