//! `mixed-hol` (LAB.md section 4; Onehouse: small-object latency 15x worse when small GETs
//! share an SDK's connection pool with large ones).
//!
//! ## The model
//!
//! Onehouse's case is a steady service, not a burst: a table service keeps many large
//! ranged reads in flight through the SDK's pool (50 connections), and metadata-sized GETs
//! arrive now and then, each waiting for a connection behind whatever large reads are
//! queued. So one run here has two parts, started together:
//!
//! - load (loaded rows only): `large_in_flight` workers (100, twice the pool's 50
//!   connections) each GET the next 8 MiB part of the large objects, over and over, until
//!   the smalls are done. The pool can carry 50 at once, so ~50 more always wait in its
//!   queue; the parts cycle over 8 synthetic objects (`synthetic/mixed-hol/size=N/large-K`,
//!   nothing to PUT);
//! - smalls: `smalls` GETs (sizes log-uniform 4 KiB-1 MiB, seeded; PUT once per server,
//!   spread over 16 prefixes so the per-prefix request limit is not what is measured)
//!   arriving open-loop at `small_rate` per second, evenly spaced, whatever the client's
//!   state (an arrival never waits for an earlier GET). At 100/s and ~35 ms each that is
//!   ~4 in flight: well under any client's capacity, so unloaded they never queue.
//!
//! A small GET's latency runs from its scheduled arrival to the end of its body (measuring
//! from the scheduled instant, not from when the task got to run, keeps a stalled client
//! from hiding its own queueing). The loaded/unloaded ratio of p50 and p99 per client is
//! the effect: h1-pool (50 connections, the SDK default), auto (the smalls carry
//! `GetParams::size_hint`, as after a listing, so auto sends them down its pipeline lane
//! while the ranged parts stay on the pool), h2 (small streams avoid connections carrying
//! bulk streams; against a second server with `--h2 on`, the s3 profile being HTTP/1.1
//! only like AWS S3), and h1-pipeline (everything pipelined, smalls behind large parts:
//! the case pipelining alone makes worse). The smalls start after a short warm-up so the
//! load has filled the pool, as long as each client's load takes to reach its rate
//! (`load_warmup` for auto and h2, whose controller and windows ramp; shorter for the
//! pool, the pipeline and the peers, which send the whole load at once).
//!
//! Large goodput is the bytes of large parts received while the smalls ran, over that
//! time, counted chunk by chunk as they arrive ([`LoadWindow`]), whichever part they belong
//! to. Counting whole parts begun inside the window (as this once did) drops the parts that
//! straddle either end: with 100 parts of 8 MiB in flight a part takes about as long as the
//! quick window (1.5 s), so that undercounted ferry's rows and read 0 for boto3-tuned's.
//!
//! ## Large objects done (issue 5: "within 10% of the link-limited time")
//!
//! A loaded run's load is closed-loop (it never finishes), so "done" is a time derived
//! from a rate: `large_done_s` is the large objects' bytes, each read once, over the large
//! rate while the smalls ran. Its reference is the same client's same load alone: the
//! large rate over the last `load_alone` of the warm-up (quick: 0.3 s, the smalls' arrival
//! window, at the end of 0.5-1 s by client; full: 1 s of 2 s), just before the first small, on the same connections with nothing else in flight
//! (`large_alone_bytes_per_s`, `large_alone_done_s`). `large_done_over_alone` = alone rate /
//! loaded rate: 1.00 when the smalls cost the large objects nothing, the goal at most
//! 1.10. Why this reference: on this machine the "link" is two shared cores (loopback,
//! CPU-bound), whose capacity drifts with other work by tens of percent between runs, so
//! a reference from another run (an unloaded large run, the best of the run) would mostly
//! measure that drift; the adjacent span of the same run does not, and it costs no extra
//! run. Its risk: a client still ramping at the warm-up's end has a low reference, which
//! flatters its ratio; the warm-up before the alone span is left for the ramp, chosen per
//! client from the warm-up's own samples (series `large_warmup_bytes`, every 50 ms): auto
//! reaches its rate at 0.6-0.8 s, the pool and the pipeline within 0.2 s.
//!
//! What `--quick` keeps and drops: every row and figure of the full size but the extra
//! 10-connection pool row, with 30 smalls (p99 is their largest) in 3 repeats, the 64 MiB
//! large objects, and warm-ups cut to each client's ramp plus a 0.3 s alone span.
//!
//! ## Fewer connections than the pool: the cap map (issue 5)
//!
//! `--auto-max-connections 24,32,40,50` runs the h1-pool and one auto row per cap
//! instead of the usual rows (the cap is each record's `client.max_connections`), to
//! ask whether a count well below 50 still moves the large objects within 10% of the
//! best. Full size, `ferry bench mixed-hol --peers none --repeats 2` and `--repeats 3
//! --auto-max-connections 24,32,40,50`, 5 interleaved repeats in all at load average
//! 3-12 (other engineers' builds and benches beside); medians (min-max); the ratio pairs
//! each row with auto at 50 in the same repeat:
//!
//! ```text
//!  auto cap  large MB/s alone   loaded            / cap 50's        small p99 ms    opened      held
//!     24     1128 (1090-1149)    973 (819-1048)   0.67 (0.38-0.81)  173 (161-237)   37 (28-51)  23.8
//!     32     1459 (767-1537)    1407 (1096-1514)  0.84 (0.58-1.14)  163 (149-244)   32 (32-36)  32.0
//!     40     1599 (683-2000)    1411 (894-1885)   0.89 (0.47-1.35)  167 (151-630)   40 (40-57)  39.9
//!     50     1706 (1293-2668)   1396 (1008-2600)  1                 290 (151-794)   50 (50-51)  50.0
//!  h1-pool   1469 (1402-1610)   1676 (1248-2339)  1.20 (0.49-1.67) 1017 (446-1557)  50          50.0
//! ```
//!
//! Up to ~32 connections auto's large rate is what its connections carry, not what the
//! machine allows: alone at a cap of 24 it moved 1,090-1,149 MB/s in every repeat
//! whatever the load, ~63 MB/s for each of its ~18 bulk connections (the small lane
//! keeps 6-8 places of the cap), which is the s3 profile's 90 MB/s with a ~30 ms first
//! byte before each 8 MiB part (8 MiB per ~123 ms: ~68 MB/s). Above that the two shared
//! cores bind, at a level that moves with the other work on the machine: at a cap of 50
//! (42 bulk connections, ~2.65 GB/s if the connections were the limit) auto moved
//! 1.0-2.7 GB/s. So taking connections away lengthens the large objects' time until the
//! CPU's ceiling, and that ceiling depends on the moment: in the busiest repeats 32
//! connections did as well as 50 (1.10x, 1.14x), in the quietest 0.58x. Per repeat no
//! count clearly below 50 stayed within 10% of it (medians 0.67, 0.84, 0.89). On this
//! machine "fewer connections than the pool" and "large objects within 10% of the
//! link-limited time" conflict (on loopback; across a link they do not: "On a link"
//! below): the emulated link is per connection (like S3), so the
//! link-limited time itself grows as connections go, and the only knee is the CPU's,
//! which moves with the machine's load between runs. The controller's goodput rule
//! (controller.rs, "Growth follows goodput") is the part that should stop at such a
//! knee when there is one; on a quiet machine growing to the cap is right. The cap map
//! also shows what the smaller counts gave the smalls: a lower p99 (163-173 ms beside
//! 290 at 50, less CPU contention), and that a capped auto can open more connections
//! than its cap over a run (24: 28-51 opened, never more than 24 at once): places
//! handed over between the lanes (auto.rs, "handovers"; one `--quick` run at a cap of
//! 24 with `FERRY_LOG=ferry_wire::auto=debug`: pool 19 + pipeline 8 opened, 3 handed
//! over by the pool).
//!
//! ## On a link
//!
//! Where it stands: since HTTP/1.1 receive windows follow the path (the bullet "Windows
//! that follow the path" below), auto's loaded small p99 is its unloaded one (~145 ms)
//! and 15.1-16.5x better than the 50-connection pool's in the median of the last three
//! rounds (14.3x in the first); the figures before it are history, kept for what they
//! found.
//!
//! Loopback has no aggregate link, which is why the cap map above found no knee but the
//! CPU's. A real client has one: an instance's NIC (5-25 Gbit/s) in front of S3's ~90
//! MB/s per connection, which a 50-connection pool oversubscribes. `--link instance`
//! (ferry-link: 1 ms RTT, 2.5 Gbit/s, a 4 MiB queue; the preset's note says why that
//! rate: on two shared cores it is the link that binds, not the CPU) emulates that case.
//! With a link each loaded row also reports `large_link_limited_s` (the large objects at
//! the preset's rate, 312.5 MB/s of payload), `large_done_over_link` (issue 5's "within
//! 10% of the link-limited time") and `link_used` (large and small bytes while the smalls
//! ran, over that rate), and an iperf3 -P 1 row measures the link once per workload run.
//!
//! Full size, `ferry bench mixed-hol --peers none --repeats 3 --link instance` (load
//! average 6-7), medians (min-max); iperf3 -P 1 carried 309 MB/s:
//!
//! ```text
//!                 small p50 ms  small p99 ms         large   done /  link   conns opened /
//!                 unl.  loaded  unl.  loaded         MB/s    link    used   peak / held  CPU s
//!  h1-pool (50)   37    1870    167   2302 (2232-2351)  293   1.07   0.99   50 / 50 / 50  4.6
//!  auto           37      59    171    277 (269-322)    293   1.07   1.00   28 / 24 / 19.4 5.4
//!  h2 (25 conns)  38     495    170   3044 (1172-6533)  290   1.08   0.98   25 / 25 / 25  5.1
//!  h1-pipeline    38    1708    169   7062 (6431-7081)  296   1.06   0.99   50 / 50 / 50  5.4
//!  h1-pool (10)   38    2951    161   3094 (3094-3422)  276   1.13   0.94   10 / 10 / 10  5.5
//! ```
//!
//! - Every 50-connection row and auto fill the link (`link_used` 0.98-1.00), so their
//!   done / link-limited is the same 1.06-1.08: the ~7% is the smalls' own bytes (100/s of
//!   ~186 KB on average: 18.6 MB/s, 6% of the link) sharing it. Auto meets "within 10%
//!   of the link-limited time" (1.07, 1.07-1.07) with fewer connections than the pool:
//!   24 at most (20-26), 19.4 held on average while the smalls ran, 28 opened (24-30; the
//!   lanes hand places over, see the cap map) beside the pool's 50.
//! - Auto's small p99 is 1.6x its unloaded p99 (goal: at most 2x); beside the pool in the
//!   same repeat it is 0.12x (0.12-0.14), 8.3x better, and 0.03x at p50 (31.6x).
//! - The 15x: on the link the 50-connection pool's own loaded/unloaded ratio is 50x at
//!   p50 and 13.8x at p99, beside 2.7-5x at p99 on loopback. Each of its connections now
//!   gets ~1/50 of the link (~6 MB/s), so an 8 MiB part takes ~1.3 s and a connection
//!   frees every ~27 ms; a small waits behind the ~50 queued parts (~1.4 s) and then
//!   moves at a connection's share. So Onehouse's case appears here with the SDK's
//!   default pool, and auto is more than 15x better than it at p50 (31.6x), not at p99 (8.3x:
//!   auto's loaded p99 is bounded by the s3 profile's lognormal first byte, unloaded p99
//!   ~170 ms, and the pool's p99 by the queue).
//! - Where auto's loaded excess comes from (`FERRY_LOG=ferry_wire::auto=trace` traces each
//!   small's time as client wait + head latency + body; two quick runs, 30 smalls loaded
//!   and 30 unloaded each, load average 6-8.5): the mean small took 52-55 ms loaded beside
//!   45-46 unloaded. Its body moved at ~35 MB/s beside ~85 unloaded (smalls over 256 KiB:
//!   16-17 ms beside 7 ms: one flow's share of a link bulk fills), and 8 of 30 were
//!   written behind another small on their pipelined connection (0-1 of 30 unloaded),
//!   waiting out its lognormal first byte: those averaged 58-77 ms, the rest 47-49. The
//!   slowest loaded smalls (91-157 ms) were mostly such queued ones. So the excess is the
//!   link's share in the body and first-byte head-of-line inside the small lane; the
//!   head latencies measured (smalls not queued) did not rise (mean 26-28 ms loaded,
//!   35-41 unloaded). Thin samples (30 a row): a full-size trace would firm it up.
//! - Hedged small GETs (auto.rs, "Hedged small GETs": a copy of a small GET whose head
//!   is later than the p95 of recent head latencies, on a connection with no head owed,
//!   within a 5% budget). Same command, main's build (d542b73) and the hedging build
//!   alternated twice (main, new, new, main; 6 repeats each; load average 2.5-11):
//!
//! ```text
//!             small p50 ms   small p99 ms                   p99: pool's over  done / link        held   copies sent / won
//!             loaded         unl.             loaded         auto's (same rep.)                          (loaded, of 2,000)
//!  main       62 (54-63)     233 (149-444)    323 (254-387)   7.2x (5.5-8.9)   1.07 (1.07-1.10)   20.1   -
//!  hedging    56 (44-61)     137 (133-145)    211 (148-398)  12.3x (5.7-18.3)  1.08 (1.07-1.22)   18.6   94 (79-98) / 23 (16-29)
//! ```
//!
//!   So the unloaded p99 falls to ~the s3 profile's own first-byte p99 and the loaded p99
//!   by a third, and auto's p99 beats the pool's by 12x in the median repeat, 15x or more
//!   in 2 of 6 (15.9x, 18.3x; the pool's own loaded p99 ranged 2.0-3.7 s): "15x better
//!   at p99" is not met steadily. In 2 of the 6 (the 15.9x among them) auto held only 9-11
//!   connections (peak 11-14) and the large objects took 1.15 and 1.22x the link-limited
//!   time; main did not in its 6. Not traced yet. A run of this build alone after them
//!   (`--repeats 2 --auto-max-connections 50`, which runs the pool and auto only, with
//!   `FERRY_LOG=ferry_wire::controller=debug`): loaded p99 257 and 300 ms, 7.7x the pool's
//!   both, 18.6-18.8 held, done / link 1.07; the low count did not recur. Its log shows
//!   slow start ending at a limit of 14-15 in the bulk-only warm-up, where goodput reached
//!   the link's ~312 MB/s: a limit that stays there is one candidate for the 9-11.
//! - A p90 delay with a 10% budget, and the loser's head latency measured (auto.rs,
//!   "Hedged small GETs"): no 15x either. Over 21 loaded repeats of hedging builds
//!   (`--repeats 3 --auto-max-connections 50`, load average 2.8-9) the pool's p99 over
//!   auto's was 2.4-12.7x (the 2.4 beside a test build), the pool's own 1.9-2.7 s. Where
//!   auto's loaded tail is (`FERRY_LOG=ferry_wire::auto=trace`, one repeat; the tracing
//!   slows it: p99 489 ms, 4.3x): of the 20 slowest loaded smalls, 16 had been written
//!   behind another small's owed head on their connection and waited 288 ms on average
//!   for it, 14 spent over 100 ms on their own body; bodies over 500 KB moved at a
//!   median 8 MB/s loaded beside 98 unloaded, and 729 of 2,000 smalls were queued behind
//!   a head loaded beside 4 unloaded. So the tail is the smalls' share of a full link, not the first byte: each
//!   small body is one flow of ~20-25 behind the link's 4 MiB queue (~13 ms), its
//!   connection idle between smalls (a sender's TCP restarts slow start after idle, the
//!   Linux default; not checked here), and the slow bodies hold up the smalls pipelined
//!   behind them. Hedging reaches first bytes only.
//! - Bulk that fills the link without queueing ahead of the smalls: tried, not landed.
//!   A temporary build set `SO_RCVBUF` on auto's bulk connections only (64 or 128 KiB,
//!   which the kernel doubles; the pipeline's left alone), so their windows add up to
//!   about the link's bandwidth-delay product plus a little queue instead of the 4 MiB
//!   queue. Same command, alternated base, 64K, 128K, 128K, 64K, base (6 repeats each,
//!   load average 1.1-4):
//!
//! ```text
//!           small p99 ms     loaded /           p50   pool p99 over       >= 15x  done / link        held
//!           loaded           unloaded p99       ms    auto's (same rep.)
//!  base     260 (157-414)    1.86 (1.19-2.99)   59     9.0x (5.5-14.7)    0 of 6  1.07 (1.07-1.09)   19.9
//!  64 KiB   140 (134-149)    1.03 (1.02-1.06)   38    15.7x (14.6-17.3)   4 of 6  1.07 (1.07-1.10)   19.4
//!  128 KiB  142 (134-177)    1.05 (0.97-1.27)   41    15.2x (13.6-18.3)   3 of 6  1.07 (1.07-1.08)   19.2
//! ```
//!
//!   So the loaded p99 falls to the unloaded one (the s3 profile's first byte with
//!   hedging, ~135 ms) with the large objects as fast (292 MB/s), and "15x better than
//!   the pool" becomes the pool's p99 over that floor: met in the median, not in every
//!   repeat. Why not landed: a fixed window is a rate cap per connection (128 KiB,
//!   doubled, over a 110 ms RTT is 1-2 MB/s: bulk-wan's transatlantic link would crawl),
//!   and setting `SO_RCVBUF` turns off the kernel's receive autotuning. The window has
//!   to follow the measured RTT and the link's rate (what the controller's goodput
//!   rounds already find), and bulk-wan must be measured beside it. The next step for
//!   the 15x.
//! - Windows that follow the path, landed (conn.rs, "Receive windows of HTTP/1.1
//!   connections"): each HTTP/1.1 connection of auto's pool gets a receive buffer of 128
//!   MB/s x the smallest handshake RTT its endpoint has shown (128 KB on this link), once
//!   a small request has met a bulk one (rounds 1-3 below capped from the first
//!   connection; round 4, in conn.rs, set the two side by side: the same p99), and
//!   paths where that is under 64 KiB (loopback) or over 4 MiB / `rmem_max` (bulk-wan's
//!   110 ms) keep the kernel's autotuning. Same command, two rounds of two builds
//!   alternated twice (6 repeats a side; load average 1.5-6): an experiment build
//!   switching the cap on by environment against itself, then the cap built in at 192
//!   MB/s against the experiment at 128; medians (min-max):
//!
//! ```text
//!                      small p99 ms    loaded /     p50   pool p99 over       >= 15x  done / link  large  held
//!                      loaded          unl. p99     ms    auto's (same rep.)                       MB/s
//!  kernel windows      268 (237-386)   1.93         60     8.0x (6.1-9.1)     0 of 6  1.07         292    20.0
//!  capped, 128 MB/s    146 (139-147)   1.05         43    14.3x (13.7-15.5)   1 of 6  1.08         290    19.8
//!  (second round)
//!  capped, 192 MB/s    158 (152-183)   1.18         45    12.9x (12.2-15.8)   2 of 6  1.07         292    18.9
//!  capped, 128 MB/s    151 (138-159)   1.11         43    15.1x (12.6-16.1)   4 of 6  1.07         292    20.1
//!  (third round: the landed build, its hedging switched by environment)
//!  hedge p95, 5%       145 (141-149)   1.08         41    16.5x (15.0-17.1)   5 of 6  1.07         292    18.8
//!  hedge p90, 10%      138 (130-143)   1.06         41    16.5x (14.3-17.3)   5 of 6  1.07         291    19.7
//! ```
//!
//!   So the loaded tail is the unloaded one (~138 ms, the s3 profile's first byte with
//!   p95 hedging), steadily, and the 15x is the pool's p99 (2.0-2.4 s) over that floor:
//!   met in the median of the second and third rounds (15.1x, 16.5x), in 10 of their
//!   12 repeats, not in the first (14.3x, where the pool's p99 was 2.0-2.2 s beside
//!   2.2-2.4 in the third). The third round also tried hedging sooner (auto.rs, "Hedged
//!   small GETs"): p90 with a 10% budget took 7 ms off auto's loaded p99 and 9 off the
//!   unloaded (128 ms, 119-133) for twice the copies (178 per 2,000 smalls beside 92);
//!   the pool's p99 over auto's did not move (16.5x both), so p95 and 5% stay.
//!   What the cap costs elsewhere (conn.rs, "Receive windows"): nothing to the s3
//!   profile's bulk across `--link region`; capped from the first connection, a quarter
//!   of a `ferry cp` download from a server faster than 128 MB/s a connection across the
//!   same link, which is why it now waits for small requests to meet bulk ones.
//! - The 9-11 did not recur in 25 loaded repeats with
//!   `FERRY_LOG=ferry_wire::controller=debug` (the 8 runs of the hedge settings above and
//!   the trace): slow start ended at 14 in 23 of them (21 in 2), auto held 14.8-26.3 on
//!   average, done / link 1.07-1.12 (the 1.10 and 1.12 beside a build); in the window
//!   runs' 18, held 12.9-26.3 (12.9 once, peak 16, done / link 1.09).
//!   What the log shows instead of a stale best: after slow start the head-latency rule
//!   (controller.rs, "Rising head latency") cut the limit 30 times in the 25 (0-7 a run,
//!   to 12 at the lowest). Its floor is the first rounds' ~21 ms median on an empty link;
//!   on the full link the queue puts round medians at 35-60 ms, over 2x. 10 of the 30
//!   cuts came when the round's goodput was already over 10% below the window's best:
//!   the rule reads falling goodput as "did not grow" and cuts further. A candidate for
//!   the 9-11, not shown to be its cause; left as it is.
//!
//! Where the knee is, `--auto-max-connections 12,16,24,50` on the same link (full size,
//! 3 repeats, load average 7-9; pool in the same run: 286 MB/s, done / link 1.09):
//!
//! ```text
//!  auto cap   large MB/s        done / link        link used   small p99 ms   peak  held
//!     12      269 (268-285)     1.16 (1.10-1.16)   0.92        218 (180-1070)  12   11.9
//!     16      271 (269-290)     1.15 (1.08-1.16)   0.93        189 (184-1066)  16   15.1
//!     24      288 (267-291)     1.08 (1.07-1.17)   0.98        346 (339-380)   24   19.6
//!     50      291 (267-293)     1.07 (1.07-1.17)   0.99        277 (262-303)   21   17.4
//! ```
//!
//! The knee is between 16 and 24 connections (the small lane keeps 6-8 of them, so ~10-16
//! carry the bulk): below it the link is left 7-8% idle, above it nothing more moves.
//! Uncapped, auto peaked at 20-26 connections in the two runs (held 16-20), at the knee, by the controller's goodput
//! rule (controller.rs, "Growth follows goodput"): with a link the rounds' goodput stops
//! growing where the link fills, a steadier signal than the CPU's moving knee on loopback.
//! So no new rule was needed for this case, and the cap map's conflict on loopback is the
//! loopback's, not the goal's. Checked in one `--quick` run with
//! `FERRY_LOG=ferry_wire::controller=trace,ferry_wire::auto=debug` (`--repeats 1
//! --auto-max-connections 50`): the loaded rounds moved 246, 313, 313, 311, 306 MB/s at
//! limits 4, 6, 9, 14, 14; growth held from 14 and slow start ended there.
//!
//! What that run also showed, left as it is: the limit was found while the bulk lane had
//! all 14 places; when the smalls began, the pipeline lane took 7 of them (the pool handed
//! 4 connections over), the bulk rounds fell to 272 and 216 MB/s, and growth stayed held
//! because the 313 MB/s best was still in the 10-round window. At the full size the best
//! expires within a few seconds and growth resumes (peak 20-26); in the quick window of
//! 0.3 s it does not, so that run's auto row used 0.88 of the link (done / link 1.20; the
//! 3-repeat quick run before it: 1.07, 1.04-1.07). Clearing a best that the lanes' split
//! made stale on a handover, as a decrease clears it, was tried and not landed: no gain
//! in 3 quick and 2 full interleaved pairs (controller.rs, "Growth follows goodput").
//!
//! ## Does the lab reproduce Onehouse's 15x, and for whom?
//!
//! Measured (`ferry bench mixed-hol --quick --peers boto3`, 3 repeats, load average 7.5;
//! and full size `--peers none --repeats 2`, load 7-8), small GET latency loaded over
//! unloaded, p50 / p99: boto3 with its default pool of 10 21.7x / 10.5x (quick); the
//! 50-connection h1-pool 8.8x / 2.7x (quick), 12.7x / 5.0x (full); the 10-connection
//! h1-pool row 67x / 17x (full: p50 2.3 s beside 35 ms); auto 1.3-1.5x / 0.9-1.1x. So the
//! 15x is reproduced by boto3 (on p50, and nearly on p99) and by a 10-connection pool, not
//! by the 50-connection pool, and "15x better than the pool" cannot be met by any client
//! here: auto's loaded p99 is at or below its unloaded p99, and the pool's own ratio is
//! 2.7-5x, so auto is 3-4x better than the pool at p99 (9.8x at p50, full size).
//!
//! Why the 50-connection pool sees less: a small GET waits in the pool's queue until a
//! connection frees, and with 8 MiB parts one frees often. At S3's 90 MB/s a part takes
//! ~30 ms to first byte and ~93 ms to transfer, so 50 connections free one every ~2.5 ms;
//! on two shared cores moving ~1.4-2 GB/s a part takes ~200-300 ms and one frees every
//! ~4-6 ms. A small behind ~50 queued parts then waits ~50 frees, ~200-300 ms, added to a
//! first byte whose unloaded p99 is already ~150 ms (lognormal): p50 rises ~9-13x, p99
//! only ~3-5x. A pool reading whole 256 MiB objects (as an SDK's plain `get_object` does)
//! frees a connection every ~60 ms at 50 x 90 MB/s, so the same queue costs seconds:
//! that is Onehouse's case, and the 10-connection row shows its size here. boto3's
//! figure has a second cause beside the queue: its client CPU (2.4 CPU s beside the
//! pool's 0.7 for the same quick load) on threads that hold the GIL; and its default pool
//! of 10 does not bound its connections (urllib3 with `block=False` opens a connection
//! when none is idle and discards it on return when the pool is full: boto3's loaded rows
//! opened 110-132 TCP connections), so it is not a pool of 10 in the queueing sense.
//! Parameters left as they are: 8 MiB parts are what the AnyBlob figures advise (LAB.md
//! section 1) and what ferry's own range reads use; the published case's whole-object
//! reads would be a second load, proposed rather than swapped in.
//!
//! The machine matters: on loopback, 50 connections at the s3 profile's 90 MB/s each ask
//! for more than two shared cores can move, so the load is CPU-bound here and slows every
//! client's smalls somewhat (the client and server share those cores). That part of the
//! loaded/unloaded ratio is not head-of-line blocking; the gap between clients in the same
//! run is.
//!
//! boto3's loaded rows open their window late: the driver starts the load's 100 threads
//! one by one, and each `Thread.start()` waits until the new thread runs, which needs the
//! GIL that the threads already started hold while they sign requests and copy bodies. In
//! one quick run that loop took 8.9 s, the 0.3 s warm-up sleep itself 0.31 s, so the smalls
//! began 9.2 s after the start (record figures `load_threads_started_s`,
//! `load_warmup_slept_s`, `smalls_window_opened_s`; the row's note says it). The smalls
//! still meet a load at full strength, and their latency runs from their own scheduled
//! arrivals, so the late start neither helps nor hurts boto3's figures: it is a boto3 user's
//! cost of starting 100 threads, not head-of-line blocking.

use crate::measure::{body, cdf, get_drain, log_uniform_sizes, set_percentiles, Errors, Meter};
use crate::record::RunRecord;
use crate::scenario::Step;
use crate::stats::Spread;
use crate::verdict::{judge_ratio, paired_ratio, x, x2, Headline};
use crate::workload::{ClientSpec, Column, ServerSpec, Size, Task, Variant, Workload};
use anyhow::{Context, Result};
use ferry_store::{GetParams, Mode, ObjectRef, RangeSpec, S3Client};
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

pub const NAME: &str = "mixed-hol";
pub const PUBLISHED: &str = "small-object latency 15x worse beside large GETs in an SDK pool (Onehouse)";
pub const BUCKET: &str = "bench";
pub const SYNTHETIC: &str = "synthetic";

#[derive(Clone, Debug, PartialEq)]
pub struct MixedHolParams {
    pub larges: usize,
    pub large_bytes: u64,
    /// Bytes per ranged read of a large object.
    pub part_bytes: u64,
    /// Ranged large reads kept in flight while the smalls arrive.
    pub large_in_flight: usize,
    pub smalls: usize,
    /// Small GETs arriving per second (open loop).
    pub small_rate: f64,
    pub small_min: u64,
    pub small_max: u64,
    pub seed: u64,
    pub prefixes: usize,
    /// Connections of every client (50: the AWS SDKs' default pool).
    pub connections: usize,
    /// Requests in flight per pipelined connection (h1-pipeline and auto).
    pub pipeline_depth: usize,
    /// Load before the first small arrives, for the clients whose load ramps up (auto's
    /// connection controller, h2's flow-control windows): the ramp, then `load_alone`.
    pub load_warmup: Duration,
    /// The same for the clients that send the whole load at once (h1-pool, h1-pipeline):
    /// at full rate once the first parts' bytes come back.
    pub load_warmup_at_once: Duration,
    /// The same for the peers' rows (their load threads or tasks start, then send at once).
    pub load_warmup_peers: Duration,
    /// The last part of every warm-up, over which the large parts' rate alone is measured
    /// (the link-limited reference of "large objects done").
    pub load_alone: Duration,
    pub repeats: usize,
    pub put_concurrency: usize,
    /// Peer rows (filtered to [`PEERS`]; the CLI's `--peers` fills it).
    pub peers: Vec<crate::peers::Peer>,
    /// Also the extra [`SMALL_POOL`] row.
    pub small_pool_row: bool,
    /// The cap map (`--auto-max-connections 24,32,40,50`): when not empty, the rows are
    /// the h1-pool and one auto row per cap, auto's hard cap on connections set to it
    /// (module note, "Fewer connections"); no h2, pipeline or extra rows.
    pub auto_caps: Vec<usize>,
    /// The emulated link the run crosses (`--link`; `None`: loopback). With one, every
    /// loaded row also reports the link-limited time of the large objects, and an
    /// [`IPERF3_ROW`] measures the link once per workload run (module note, "On a link").
    pub link: Option<ferry_link::Preset>,
}

/// The peers beside mixed-hol: the SDK-pool clients the published case is about (boto3
/// with its default pool of 10 and tuned to the connections), the CRT and obstore.
pub const PEERS: [crate::peers::Peer; 4] = [
    crate::peers::Peer::Boto3,
    crate::peers::Peer::Boto3Tuned,
    crate::peers::Peer::Awscrt,
    crate::peers::Peer::Obstore,
];

impl MixedHolParams {
    pub fn new(size: Size) -> MixedHolParams {
        MixedHolParams {
            larges: 8,
            large_bytes: match size {
                Size::Quick => 64 << 20,
                Size::Full => 256 << 20,
            },
            part_bytes: 8 << 20,
            large_in_flight: 100,
            // Quick: 30 arrivals at 100/s, a 0.3 s window (150 until e5dba7e: 104 s for
            // the workload with each peer row run once; 60 with the peers repeated: 87 s
            // at load average 13; 40 until lab10: 62 s on a quiet machine, over the
            // minute). The load is the same, so each small still meets ~50 queued parts;
            // p99 of 30 is their largest (nearest rank), as it was of 40, and the 3
            // repeats give its spread. A loaded run lasts the warm-up, the window and the
            // slowest small (0.1-1 s for ferry's rows, 0.5-2 s for the peers' under load);
            // an unloaded run, the window and ~0.1 s.
            smalls: match size {
                Size::Quick => 30,
                Size::Full => 2_000,
            },
            small_rate: 100.0,
            small_min: 4 << 10,
            small_max: 1 << 20,
            seed: 7,
            prefixes: 16,
            connections: 50,
            pipeline_depth: 16,
            // Quick: 1 s for auto and h2. The load's 100 GETs are sent and the pool full
            // after ~200 ms, but auto's controller is still in slow start then: with a
            // 200 ms warm-up the 0.4 s window measured its ramp (quick, 3 repeats at
            // 64f30e2: auto's large MB/s 969 (362-1192) beside the pool's 2313), where the
            // 20 s window of the full size gave 2303 beside 2530 (one repeat, same build).
            // The warm-up's samples (series large_warmup_bytes, every 50 ms) show the
            // ramps per 100 ms (quick, 3 repeats, load average 5-9): auto reaches its
            // steady rate at 0.6-0.8 s (216 361 430 741 954 1705 2304 2515 2675 MB/s),
            // h2 at ~0.5-0.7 s; h1-pool and h1-pipeline are within ~20% of theirs from the
            // first 100 ms (2086 2746 2510 ...) and steady from 0.2 s; the peers' threads
            // or tasks start and their rate is up by 0.3-0.4 s (boto3: 0 306 1262 1341
            // ...). Bulk transfers of the published case run for seconds before and after
            // a small GET; the ramp is bulk-get's and bulk-wan's to show.
            load_warmup: match size {
                Size::Quick => Duration::from_secs(1),
                Size::Full => Duration::from_secs(2),
            },
            // Quick: 0.2 s of ramp, then the alone span (0.5 s in all).
            load_warmup_at_once: match size {
                Size::Quick => Duration::from_millis(500),
                Size::Full => Duration::from_secs(2),
            },
            // Quick: 0.4 s of ramp, then the alone span (0.7 s in all).
            load_warmup_peers: match size {
                Size::Quick => Duration::from_millis(700),
                Size::Full => Duration::from_secs(2),
            },
            // The warm-up's end (quick: 0.3 s, the smalls' arrival window; full: 1 s).
            // Until lab10 the quick warm-up was 1 s for every client with the last 0.5 s
            // alone; at 0.5-1 s auto was still ramping in one repeat of three (alone 2169
            // beside 2403 MB/s while the smalls ran), at 0.7-1 s it is past its ramp.
            load_alone: match size {
                Size::Quick => Duration::from_millis(300),
                Size::Full => Duration::from_secs(1),
            },
            repeats: 3,
            put_concurrency: 64,
            peers: Vec::new(),
            // Quick leaves the extra 10-connection row out (7.4 s of loaded runs in 87 s):
            // boto3's row, on that same default pool of 10, shows the published case.
            small_pool_row: size == Size::Full,
            auto_caps: Vec::new(),
            link: None,
        }
    }

    /// The warm-up of a ferry client in `mode` ([`MixedHolParams::load_warmup`] and
    /// [`MixedHolParams::load_warmup_at_once`]).
    pub fn warmup_for(&self, mode: Mode) -> Duration {
        match mode {
            Mode::H1Pool | Mode::H1Pipeline => self.load_warmup_at_once,
            Mode::Auto | Mode::H2 => self.load_warmup,
        }
    }

    /// The span over which the smalls arrive.
    pub fn arrival_window(&self) -> Duration {
        Duration::from_secs_f64(self.smalls as f64 / self.small_rate.max(1e-9))
    }
}

/// `mixed-hol/pNN/small-NNNNNN`, object `i` in prefix `i % prefixes`.
pub fn small_keys(n: usize, prefixes: usize) -> Vec<String> {
    let prefixes = prefixes.max(1);
    (0..n).map(|i| format!("mixed-hol/p{:02}/small-{:06}", i % prefixes, i)).collect()
}

/// Keys of the synthetic bucket that name their size: `mixed-hol/size=N/large-K`.
pub fn large_keys(n: usize, bytes: u64) -> Vec<String> {
    (0..n).map(|k| format!("mixed-hol/size={bytes}/large-{k}")).collect()
}

/// The ranged parts of the large objects, in the order the load reads them (part j of
/// every object before part j+1): `(object index, first byte, last byte)`.
pub fn large_parts(larges: usize, large_bytes: u64, part_bytes: u64) -> Vec<(usize, u64, u64)> {
    let part = part_bytes.clamp(1, large_bytes.max(1));
    let per = large_bytes.div_ceil(part);
    let mut out = Vec::new();
    for j in 0..per {
        for k in 0..larges {
            let from = j * part;
            out.push((k, from, (from + part).min(large_bytes) - 1));
        }
    }
    out
}

/// The load's goodput window: the bytes of large parts received while it is open (from
/// the first small's arrival to the last small's end), whichever part they belong to.
#[derive(Debug, Default)]
pub struct LoadWindow {
    /// (open, bytes received while open, bytes received in all)
    state: std::sync::Mutex<(bool, u64, u64)>,
}

impl LoadWindow {
    pub fn open(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).0 = true;
    }

    /// `n` bytes of a large part arrived.
    pub fn received(&self, n: u64) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.0 {
            s.1 += n;
        }
        s.2 += n;
    }

    /// Every large byte received so far, window open or not.
    pub fn total(&self) -> u64 {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).2
    }

    /// Closes the window: the bytes received while it was open.
    pub fn close(&self) -> u64 {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.0 = false;
        s.1
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Unloaded,
    Loaded,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Unloaded => "unloaded",
            Phase::Loaded => "loaded",
        }
    }
}

/// One run: the smalls (key, size) arriving at `small_rate`, and, when loaded, the
/// large parts kept `large_in_flight` deep.
#[derive(Clone, Debug, PartialEq)]
pub struct MixedHolRun {
    pub phase: Phase,
    pub smalls: Arc<Vec<(String, u64)>>,
    pub small_rate: f64,
    /// Small GETs carry `GetParams::size_hint` (auto's rows).
    pub size_hint: bool,
    pub larges: Arc<Vec<String>>,
    pub parts: Arc<Vec<(usize, u64, u64)>>,
    pub large_in_flight: usize,
    pub load_warmup: Duration,
    pub load_alone: Duration,
    pub seed: u64,
    pub put_concurrency: usize,
    /// The link's rate in payload bytes per second, when the run crosses one: the
    /// reference of `large_done_over_link` ([`link_limited_figures`]).
    pub link_bytes_per_s: Option<f64>,
}

/// "Large objects done" figures of a loaded run: the time the large objects (all of
/// them once, `total` bytes) take at the rate the load got while the smalls ran, the same
/// at the rate it got alone just before, and their ratio (loaded over alone; the
/// scheduler's goal: at most 1.10).
pub fn large_done_figures(rec: &mut RunRecord, total: u64, loaded_rate: f64, alone_rate: f64) {
    rec.set("large_alone_bytes_per_s", alone_rate);
    if loaded_rate > 0.0 {
        rec.set("large_done_s", total as f64 / loaded_rate);
    }
    if alone_rate > 0.0 {
        rec.set("large_alone_done_s", total as f64 / alone_rate);
    }
    if loaded_rate > 0.0 && alone_rate > 0.0 {
        rec.set("large_done_over_alone", alone_rate / loaded_rate);
    }
}

/// The link-limited figures of a loaded run on a link of `link_rate` bytes per second:
/// the large objects (`total` bytes, each once) at the link's rate, and the time they take
/// at the loaded rate over it (1.00: the link carried nothing but large bytes while the
/// smalls ran; issue 5's goal: at most 1.10). `link_used`: the large and small bytes
/// received while the smalls ran (`small_rate`: the smalls' bytes over that window) over
/// the link's rate, so that a ratio above 1 can be told apart as the smalls' share of a
/// full link (~6% at the full size: 100/s of ~186 KB on average) or a link left idle.
pub fn link_limited_figures(rec: &mut RunRecord, total: u64, loaded_rate: f64, small_rate: f64, link_rate: f64) {
    if link_rate <= 0.0 {
        return;
    }
    rec.set("large_link_bytes_per_s", link_rate);
    rec.set("link_used", (loaded_rate + small_rate) / link_rate);
    rec.set("large_link_limited_s", total as f64 / link_rate);
    if loaded_rate > 0.0 {
        rec.set("large_done_over_link", link_rate / loaded_rate);
    }
}

/// A preset's rate as bytes per second of TCP payload: the serializer's bits over 8. The
/// delay line charges each 64 KiB segment's headers once (delay.rs: a packet's length less its vnet header), so the payload is
/// within 0.2% of it; iperf3 -P 1 / -P 8 carried 97-98% / 99% of the instance preset.
pub fn link_payload_rate(p: &ferry_link::Preset) -> f64 {
    p.rate_bits_per_s as f64 / 8.0
}

/// What [`warm_up`] saw: the large bytes received over the last `alone` span and how long
/// that span took, and the cumulative large bytes sampled every [`WARMUP_SAMPLE`] from the
/// load's start (seconds, bytes): the ramp the warm-up waits out, kept in the record so a
/// shorter warm-up can be judged from it.
pub struct WarmUp {
    pub alone: (u64, Duration),
    pub points: Vec<[f64; 2]>,
}

/// How often [`warm_up`] samples the large bytes received.
pub const WARMUP_SAMPLE: Duration = Duration::from_millis(50);

/// Waits `warmup` while the load runs, sampling the bytes it has received; the last
/// `alone` of it is the large rate alone. A wake-up that comes late (a busy runtime) moves
/// the end, never shortens the alone span: it runs at least `alone` from where it began.
pub async fn warm_up(window: &LoadWindow, warmup: Duration, alone: Duration) -> WarmUp {
    let start = Instant::now();
    let alone = alone.min(warmup);
    let alone_from = start + (warmup - alone);
    let mut end = start + warmup;
    let mut points = vec![[0.0, window.total() as f64]];
    let mut mark: Option<(u64, Instant)> = None;
    loop {
        let now = Instant::now();
        if mark.is_none() && now >= alone_from {
            mark = Some((window.total(), now));
            end = end.max(now + alone);
        }
        if now >= end {
            break;
        }
        let next = (now + WARMUP_SAMPLE).min(end);
        let next = if mark.is_none() { next.min(alone_from) } else { next };
        tokio::time::sleep_until(next.into()).await;
        points.push([start.elapsed().as_secs_f64(), window.total() as f64]);
    }
    let (b0, t0) = mark.unwrap_or((window.total(), Instant::now()));
    WarmUp { alone: (window.total() - b0, t0.elapsed()), points }
}

crate::impl_scenario!(MixedHolRun);

impl MixedHolRun {
    /// Bytes of the large objects, each read once.
    pub fn large_total_bytes(&self) -> u64 {
        self.parts.iter().map(|(_, a, b)| b - a + 1).sum()
    }

    pub fn setup_key(&self) -> String {
        format!("{} small objects (seed {}) and {} large", self.smalls.len(), self.seed, self.larges.len())
    }

    pub async fn setup(&self, c: &S3Client) -> Result<()> {
        c.create_bucket(BUCKET).await.with_context(|| format!("creating bucket {BUCKET}"))?;
        let max = self.smalls.iter().map(|s| s.1).max().unwrap_or(0) as usize;
        let buf = body(max, 0);
        let smalls = self.smalls.iter().map(|(key, size)| (key.clone(), buf.slice(..*size as usize)));
        crate::measure::put_all(c, BUCKET, smalls, self.put_concurrency).await?;
        // The first access of a synthetic key computes its CRC (a pass over the object):
        // done here, untimed.
        for key in self.larges.iter() {
            c.head_object(&ObjectRef::new(SYNTHETIC, key.as_str()))
                .await
                .with_context(|| format!("HEAD {SYNTHETIC}/{key}"))?;
        }
        Ok(())
    }

    pub fn params(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("phase".into(), json!(self.phase.name()));
        m.insert("small_size_hint".into(), json!(self.size_hint));
        if self.phase == Phase::Loaded {
            m.insert("run_load_warmup_s".into(), json!(self.load_warmup.as_secs_f64()));
        }
        m
    }

    pub async fn run(&self, c: &S3Client, rec: &mut RunRecord) -> Result<()> {
        let meter = Meter::start(c);
        let open = OpenSampler::start(c);
        let mut errors = Errors::default();
        // The load: workers taking the next part until aborted.
        let mut load = JoinSet::new();
        let (next_part, parts_done, large_bytes) =
            (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let window = Arc::new(LoadWindow::default());
        let mut alone: Option<(u64, Duration)> = None;
        if self.phase == Phase::Loaded && !self.parts.is_empty() {
            for _ in 0..self.large_in_flight.max(1) {
                let (c, parts, larges) = (c.clone(), self.parts.clone(), self.larges.clone());
                let (next_part, parts_done, large_bytes, window) =
                    (next_part.clone(), parts_done.clone(), large_bytes.clone(), window.clone());
                load.spawn(async move {
                    loop {
                        let i = next_part.fetch_add(1, Relaxed) as usize % parts.len();
                        let (k, from, to) = parts[i];
                        let obj = ObjectRef::new(SYNTHETIC, larges[k].as_str());
                        let what = || format!("GET {obj} bytes {from}-{to}");
                        let mut out = c
                            .get_object(&obj, GetParams::range(RangeSpec::FromTo(from, to)))
                            .await
                            .with_context(what)?;
                        let mut n = 0u64;
                        while let Some(chunk) = out.body.chunk().await {
                            let len = chunk.with_context(what)?.len() as u64;
                            n += len;
                            window.received(len);
                        }
                        if n != to - from + 1 {
                            anyhow::bail!("GET {obj} bytes {from}-{to}: {n} bytes");
                        }
                        parts_done.fetch_add(1, Relaxed);
                        large_bytes.fetch_add(n, Relaxed);
                    }
                    #[allow(unreachable_code)]
                    Ok::<(), anyhow::Error>(())
                });
            }
            // The warm-up; its last `load_alone` measures the large parts alone.
            let trace = warm_up(&window, self.load_warmup, self.load_alone).await;
            alone = Some(trace.alone);
            rec.set_series("large_warmup_bytes", trace.points);
        }
        // The smalls, open loop: arrival i at t0 + i / rate.
        let t0 = Instant::now();
        window.open();
        open.window_opened();
        let spacing = Duration::from_secs_f64(1.0 / self.small_rate.max(1e-9));
        let mut smalls = JoinSet::new();
        for (i, (key, size)) in self.smalls.iter().enumerate() {
            let arrival = t0 + spacing * i as u32;
            tokio::time::sleep_until(arrival.into()).await;
            let (c, obj, size) = (c.clone(), ObjectRef::new(BUCKET, key.as_str()), *size);
            let mut params = GetParams::default();
            if self.size_hint {
                params.size_hint = Some(size);
            }
            smalls.spawn(async move {
                let r = match get_drain(&c, &obj, params).await {
                    Ok((n, _)) if n == size => Ok(n),
                    Ok((n, _)) => Err(anyhow::anyhow!("GET {obj}: {n} bytes, expected {size}")),
                    Err(e) => Err(e.context(format!("GET {obj}"))),
                };
                (arrival.elapsed(), r)
            });
            // A finished load worker failed: report it (it stops loading).
            while let Some(done) = load.try_join_next() {
                if let Ok(Err(e)) = done {
                    errors.add(format!("{e:#}"));
                }
            }
        }
        let mut small_lat = Vec::with_capacity(self.smalls.len());
        let mut bytes = 0u64;
        while let Some(done) = smalls.join_next().await {
            let (lat, r) = done?;
            match r {
                Ok(n) => {
                    bytes += n;
                    small_lat.push(lat.as_secs_f64());
                }
                Err(e) => errors.add(format!("{e:#}")),
            }
        }
        let window_bytes = window.close();
        let window = t0.elapsed();
        open.record(rec);
        load.abort_all();
        while let Some(done) = load.join_next().await {
            if let Ok(Err(e)) = done {
                errors.add(format!("{e:#}"));
            }
        }
        meter.record(c, rec, "");
        rec.set("smalls", small_lat.len() as f64);
        rec.set("smalls_done_s", window.as_secs_f64());
        rec.set("small_bytes", bytes as f64);
        if self.phase == Phase::Loaded {
            rec.set("large_parts_done", parts_done.load(Relaxed) as f64);
            rec.set("large_bytes", large_bytes.load(Relaxed) as f64);
            let loaded_rate = window_bytes as f64 / window.as_secs_f64().max(1e-9);
            rec.set("large_bytes_per_s", loaded_rate);
            if let Some((b, t)) = alone {
                large_done_figures(rec, self.large_total_bytes(), loaded_rate, b as f64 / t.as_secs_f64().max(1e-9));
            }
            if let Some(link) = self.link_bytes_per_s {
                link_limited_figures(
                    rec,
                    self.large_total_bytes(),
                    loaded_rate,
                    bytes as f64 / window.as_secs_f64().max(1e-9),
                    link,
                );
            }
        }
        set_percentiles(rec, "small_latency", "ms", &mut small_lat, 1e3);
        rec.set_series("small_latency_s", cdf(&small_lat));
        errors.record(rec);
        Ok(())
    }
}

/// Connections the client holds open, sampled every [`OPEN_SAMPLE`] over a run
/// (`TransportStats::connections_open`): the peak sampled from the start, and the mean
/// over the smalls' window. What "fewer connections than the pool" means while a load
/// runs: `connections_opened` counts openings, and a client that gives connections back
/// (a pool closing idle connections over a lowered limit) opens as many as it reached,
/// but holds fewer.
struct OpenSampler {
    /// (peak, sum over the window, samples in the window, window open)
    state: Arc<std::sync::Mutex<(u64, u64, u64, bool)>>,
    task: tokio::task::JoinHandle<()>,
}

/// How often [`OpenSampler`] reads the open connections: 20 ms, a fifth of a part's
/// transfer at S3's 90 MB/s, so the mean is steady; a peak shorter than it can be missed.
const OPEN_SAMPLE: Duration = Duration::from_millis(20);

impl OpenSampler {
    fn start(c: &S3Client) -> OpenSampler {
        let state = Arc::new(std::sync::Mutex::new((0u64, 0u64, 0u64, false)));
        let (c, st) = (c.clone(), state.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(OPEN_SAMPLE);
            loop {
                tick.tick().await;
                let open = c.transport().stats().connections_open;
                let mut s = st.lock().unwrap_or_else(|e| e.into_inner());
                s.0 = s.0.max(open);
                if s.3 {
                    s.1 += open;
                    s.2 += 1;
                }
            }
        });
        OpenSampler { state, task }
    }

    fn window_opened(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).3 = true;
    }

    /// `connections_open_peak` and `connections_open_mean_window`; stops sampling.
    fn record(&self, rec: &mut RunRecord) {
        self.task.abort();
        let s = *self.state.lock().unwrap_or_else(|e| e.into_inner());
        rec.set("connections_open_peak", s.0 as f64);
        if s.2 > 0 {
            rec.set("connections_open_mean_window", s.1 as f64 / s.2 as f64);
        }
    }
}

impl Drop for OpenSampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The row every loaded row is held against, in the same repeat: the SDK-default pool of
/// 50 connections under the same load (the published "15x" compares a client with it).
pub const POOL_LOADED_ROW: &str = "h1-pool · loaded";
/// What every loaded row's label ends with ([`row_label`]).
pub const LOADED_SUFFIX: &str = " · loaded";

pub const COLUMNS: &[Column] = &[
    Column::new("small p50 ms", "small_latency_p50_ms", 1.0, 1),
    Column::new("small p90 ms", "small_latency_p90_ms", 1.0, 1),
    Column::new("small p99 ms", "small_latency_p99_ms", 1.0, 1),
    Column::ratio("p50 / h1-pool's (loaded, same repeat)", "small_latency_p50_ms", LOADED_SUFFIX, POOL_LOADED_ROW, 2),
    Column::ratio("p99 / h1-pool's (loaded, same repeat)", "small_latency_p99_ms", LOADED_SUFFIX, POOL_LOADED_ROW, 2),
    Column::new("smalls done s", "smalls_done_s", 1.0, 2),
    Column::new("large MB/s alone (warm-up's end)", "large_alone_bytes_per_s", 1e-6, 0),
    Column::new("large MB/s (while smalls ran)", "large_bytes_per_s", 1e-6, 0),
    Column::new("large done s (at that rate)", "large_done_s", 1.0, 2),
    Column::new("large done / alone", "large_done_over_alone", 1.0, 2),
    Column::new("large parts done", "large_parts_done", 1.0, 0),
    Column::CONNECTIONS_OPENED,
    Column::new("conns open, peak", "connections_open_peak", 1.0, 0),
    Column::new("conns open, mean while smalls ran", "connections_open_mean_window", 1.0, 1),
    Column::CLIENT_CPU,
    Column::ERRORS,
];

/// [`COLUMNS`] with a link (module note, "On a link"): the link-limited figures after
/// "large done / alone", and the iperf3 row's rate.
pub const LINK_COLUMNS: &[Column] = &[
    COLUMNS[0],
    COLUMNS[1],
    COLUMNS[2],
    COLUMNS[3],
    COLUMNS[4],
    COLUMNS[5],
    COLUMNS[6],
    COLUMNS[7],
    COLUMNS[8],
    COLUMNS[9],
    Column::new("large link-limited s", "large_link_limited_s", 1.0, 2),
    Column::new("large done / link-limited", "large_done_over_link", 1.0, 2),
    Column::new("link used (large + small) while smalls ran", "link_used", 1.0, 2),
    Column::new("link MB/s (iperf3 row)", "bytes_per_s", 1e-6, 0),
    COLUMNS[10],
    COLUMNS[11],
    COLUMNS[12],
    COLUMNS[13],
    COLUMNS[14],
    COLUMNS[15],
];

/// The clients compared, in row order: (label, mode, server index). auto's smalls carry
/// `size_hint`; the other modes ignore it.
pub const CLIENTS: &[(&str, Mode, usize)] = &[
    ("h1-pool", Mode::H1Pool, 0),
    ("auto", Mode::Auto, 0),
    ("h2 [s3 --h2 on]", Mode::H2, 1),
    ("h1-pipeline", Mode::H1Pipeline, 0),
];

/// An extra row beside [`CLIENTS`], not part of the published comparison: the pool
/// sized like boto3's default (10 connections) under the same load, so that nearly all
/// of its connections carry large reads and each small GET queues behind ~90 of them,
/// the situation Onehouse measured (an SDK pool full of large GETs). Its connections
/// differ from the other rows' on purpose; the label says so.
pub const SMALL_POOL: (&str, Mode, usize, usize) = ("h1-pool [10 conns, boto3's default pool]", Mode::H1Pool, 0, 10);

/// The row that measures the link, once per workload run after the repeats, when the run
/// crosses one: iperf3 -P 1 across it (the runner's [`Task::Iperf3`]; on a 1 ms link one
/// stream fills the rate: -P 1 and -P 8 carried 2.43-2.46 and 2.48 Gbit/s of 2.5).
pub const IPERF3_ROW: &str = "iperf3 -P 1 (the link's ceiling)";

/// Seconds of the [`IPERF3_ROW`].
pub const IPERF3_SECONDS: u32 = 4;

/// The label of auto's row capped at `cap` connections (the cap map).
pub fn capped_auto_label(cap: usize) -> String {
    format!("auto [max {cap} conns]")
}

/// The rows of a run: (label, mode, server index, connections).
fn rows(p: &MixedHolParams) -> Vec<(String, Mode, usize, usize)> {
    if !p.auto_caps.is_empty() {
        let pool = std::iter::once((CLIENTS[0].0.to_string(), CLIENTS[0].1, CLIENTS[0].2, p.connections));
        return pool
            .chain(p.auto_caps.iter().map(|&cap| (capped_auto_label(cap), Mode::Auto, 0, cap.max(1))))
            .collect();
    }
    let small_pool = std::iter::once(SMALL_POOL).filter(|_| p.small_pool_row);
    CLIENTS
        .iter()
        .map(|&(l, m, s)| (l, m, s, p.connections))
        .chain(small_pool)
        .map(|(l, m, s, c)| (l.to_string(), m, s, c))
        .collect()
}

pub fn row_label(client: &str, phase: Phase) -> String {
    format!("{client} · {}", phase.name())
}

pub fn mixed_hol(size: Size, p: &MixedHolParams) -> Workload {
    let sizes = log_uniform_sizes(p.smalls, p.small_min, p.small_max, p.seed);
    let smalls: Arc<Vec<(String, u64)>> =
        Arc::new(small_keys(p.smalls, p.prefixes).into_iter().zip(sizes.iter().copied()).collect());
    let larges = Arc::new(large_keys(p.larges, p.large_bytes));
    let parts = Arc::new(large_parts(p.larges, p.large_bytes, p.part_bytes));
    let (s3, s3_h2) = (ServerSpec::profile("s3"), ServerSpec::s3_h2());
    let mut variants = Vec::new();
    for (label, mode, server, connections) in rows(p) {
        for phase in [Phase::Unloaded, Phase::Loaded] {
            let hint = mode == Mode::Auto;
            variants.push(Variant {
                label: row_label(&label, phase),
                workload: NAME,
                server: Some(server),
                client: Some(ClientSpec { mode, max_connections: connections, pipeline_depth: p.pipeline_depth }),
                task: Task::Scenario(Step::new(MixedHolRun {
                    phase,
                    smalls: smalls.clone(),
                    small_rate: p.small_rate,
                    size_hint: hint,
                    larges: larges.clone(),
                    parts: parts.clone(),
                    large_in_flight: p.large_in_flight,
                    load_warmup: p.warmup_for(mode),
                    load_alone: p.load_alone,
                    seed: p.seed,
                    put_concurrency: p.put_concurrency,
                    link_bytes_per_s: p.link.as_ref().map(link_payload_rate),
                })),
                note: hint.then(|| {
                    "small GETs carry size_hint (known sizes, as after a listing): auto's small lane".to_string()
                }),
                once: false,
            });
        }
    }
    if let Some(link) = &p.link {
        variants.push(Variant {
            label: IPERF3_ROW.into(),
            workload: NAME,
            server: None,
            client: None,
            task: Task::Iperf3 { seconds: IPERF3_SECONDS },
            note: Some(format!("the {link} link measured once after the repeats; the loaded rows' \"large done / link-limited\" is held against the preset's rate")),
            once: true,
        });
    }
    let peers: Vec<crate::peers::Peer> = p.peers.iter().copied().filter(|x| PEERS.contains(x)).collect();
    for phase in [Phase::Unloaded, Phase::Loaded] {
        let op = crate::peers::PeerOp::MixedHol {
            bucket: BUCKET.into(),
            smalls: smalls.clone(),
            small_rate: p.small_rate,
            large_bucket: SYNTHETIC.into(),
            larges: larges.clone(),
            parts: parts.clone(),
            large_in_flight: p.large_in_flight,
            load_warmup: p.load_warmup_peers,
            load_alone: p.load_alone,
            loaded: phase == Phase::Loaded,
            connections: p.connections,
        };
        // Every size repeats the peer rows, interleaved with ferry's (the driver's fork
        // server pays Python's start-up once; peers.rs).
        variants.extend(crate::peers::op_rows(NAME, &peers, 0, op, &format!(" · {}", phase.name())));
    }
    let small_bytes: u64 = sizes.iter().sum();
    let params = json!({
        "larges": p.larges,
        "large_bytes": p.large_bytes,
        "part_bytes": p.part_bytes,
        "large_in_flight": p.large_in_flight,
        "smalls": p.smalls,
        "small_rate_per_s": p.small_rate,
        "small_bytes_total": small_bytes,
        "small_size_min": p.small_min,
        "small_size_max": p.small_max,
        "small_size_distribution": "log-uniform, seeded (rand StdRng)",
        "seed": p.seed,
        "prefixes": p.prefixes,
        "connections": p.connections,
        "auto_max_connections": p.auto_caps,
        "link_rate_bits_per_s": p.link.map(|l| l.rate_bits_per_s),
        "large_link_limited": "with a link: large_link_limited_s, the large objects' bytes (each once) at the link preset's rate (large_link_bytes_per_s, payload bytes/s); large_done_over_link: large_done_s over it (the goal: at most 1.10)",
        "pipeline_depth": p.pipeline_depth,
        "load_warmup_s": p.load_warmup.as_secs_f64(),
        "load_warmup_at_once_s": p.load_warmup_at_once.as_secs_f64(),
        "load_warmup_peers_s": p.load_warmup_peers.as_secs_f64(),
        "load_alone_s": p.load_alone.as_secs_f64(),
        "large_done": "large_done_s: the large objects' bytes (each once) at the rate while the smalls ran; large_alone_done_s: at the rate of the same load alone over the warm-up's last load_alone_s; large_done_over_alone: their ratio",
        "model": "loaded: large_in_flight ranged part GETs kept in flight (closed loop); smalls arrive open loop at small_rate_per_s",
        "large_keys": "synthetic/mixed-hol/size=N/large-K",
        "small_keys": "bench/mixed-hol/pNN/small-NNNNNN",
        "latency": "scheduled arrival to end of body, including time queued in the client",
    });
    Workload {
        notes: vec![
            format!(
                "loaded: {} ranged GETs of {} MiB kept in flight over {} x {} MiB synthetic objects (the pool has {} connections); smalls: {} GETs ({:.0} MiB in all, log-uniform 4 KiB-1 MiB, seed {}) arriving open loop at {}/s after {} ms of load (h1-pool and h1-pipeline: {} ms, peers: {} ms; each ramps, then its last {} ms measure the load alone).",
                p.large_in_flight,
                p.part_bytes >> 20,
                p.larges,
                p.large_bytes >> 20,
                p.connections,
                p.smalls,
                small_bytes as f64 / 1048576.0,
                p.seed,
                p.small_rate,
                p.load_warmup.as_millis(),
                p.load_warmup_at_once.as_millis(),
                p.load_warmup_peers.as_millis(),
                p.load_alone.as_millis()
            ),
            format!("large done: the time the {} large objects ({} MiB, each read once) take at the large rate while the smalls ran; alone: the same client's same load over the warm-up's last {} ms, just before the first small (the link-limited reference: the same connections, nothing else in flight, ramp-up behind it); done / alone = alone rate / loaded rate, the scheduler's goal is at most 1.10.", p.larges, (p.larges as u64 * p.large_bytes) >> 20, p.load_alone.as_millis()),
            match &p.link {
                None => "small latency: from the scheduled arrival to the end of the body. On this machine the load is CPU-bound (loopback, 2 shared cores), which slows every client's smalls somewhat; compare clients within a run.".into(),
                Some(l) => format!("small latency: from the scheduled arrival to the end of the body. Across the {l} link: the large load asks more than its rate, so every row's bytes queue at the link (module note, \"On a link\"); large done / link-limited: the large objects at the loaded rate over the same at the preset's rate ({:.0} MB/s of payload), the goal at most 1.10.", link_payload_rate(l) / 1e6),
            },
            if p.small_pool_row {
                format!("extra row \"{}\": the h1-pool with 10 connections (boto3's default pool) under the same load, so its connections are all but full of large reads, the situation of the published case; the other rows have {} connections.", SMALL_POOL.0, p.connections)
            } else {
                format!("--quick leaves out the extra row \"{}\" (the full size has it); boto3's rows use that same default pool of 10.", SMALL_POOL.0)
            },
            "unloaded and loaded rows are separate runs with fresh clients of the same settings; the h2 rows ran against a second server, --profile s3 --h2 on (the s3 profile is HTTP/1.1 only, like AWS S3).".into(),
            "peer rows (bench/peers/driver.py's mixed_hol op): the same smalls, parts and arrival schedule, driven as each peer's users would (the row's note says how), repeated and interleaved like ferry's rows.".into(),
            "p50 / p99 / h1-pool's: each loaded row's small-GET latency over h1-pool's loaded latency in the same repeat (below 1: better than the 50-connection pool; 0.07x is 15x better); the median of those ratios (min-max). A peer row that ran once (--quick) is paired with repeat 1.".into(),
        ],
        headline: Some(claim),
        ..Workload::scenario(NAME, size, vec![s3, s3_h2], variants, p.repeats, params, if p.link.is_some() { LINK_COLUMNS } else { COLUMNS })
    }
}

/// The claims table's row for `mixed-hol`: the pool's small-GET latency loaded over unloaded against Onehouse's 15x, with auto's
/// against the loaded pool, the large objects' done time and, on a link, the connections held.
pub fn claim(records: &[RunRecord]) -> Headline {
    let h = |published: &str, measured: String, verdict: &str| Headline::new("mixed-hol", published, measured, verdict);
    #[allow(unused)]
    let none = || "no paired clean runs".to_string();
    let published = "15x small-GET latency beside large GETs in an SDK pool (Onehouse)";
    let r = |c: &str, f: &str| paired_ratio(records, &row_label(c, Phase::Loaded), &row_label(c, Phase::Unloaded), f);
    match r("h1-pool", "small_latency_p50_ms") {
        Some(p50) => {
            let p99 = |c: &str| {
                r(c, "small_latency_p99_ms").map(|s| format!("{:.1}x", s.median)).unwrap_or_else(|| "-".into())
            };
            let others: Vec<String> = ["auto", "h2 [s3 --h2 on]", "h1-pipeline"]
                .iter()
                .filter_map(|c| r(c, "small_latency_p50_ms").map(|s| format!("{c} {:.1}x / {}", s.median, p99(c))))
                .collect();
            // The SDK-pool peers are the published case itself.
            let peers: Vec<String> = PEERS
                .iter()
                .filter_map(|p| {
                    r(p.name(), "small_latency_p50_ms")
                        .map(|s| format!("{} {:.1}x / {}", p.name(), s.median, p99(p.name())))
                })
                .collect();
            let peers = if peers.is_empty() { String::new() } else { format!("; peers: {}", peers.join(", ")) };
            // The "15x better than a 50-connection pool" of the issue: auto's loaded
            // latency over the pool's loaded latency, paired by repeat.
            let vs_pool = |f: &str| paired_ratio(records, &row_label("auto", Phase::Loaded), POOL_LOADED_ROW, f);
            let auto = match (vs_pool("small_latency_p50_ms"), vs_pool("small_latency_p99_ms")) {
                (Some(a), Some(b)) if a.median > 0.0 && b.median > 0.0 => format!(
                    "; auto loaded / h1-pool loaded (same repeat), p50 / p99: {} / {} ({:.1}x / {:.1}x better)",
                    x2(&a),
                    x2(&b),
                    1.0 / a.median,
                    1.0 / b.median
                ),
                _ => String::new(),
            };
            // Issue 5's "large objects done within 10% of the link-limited time":
            // per loaded row, the large objects' time at the rate while the smalls
            // ran over the time at the same load's rate alone (mixed_hol.rs).
            let figure_spread = |v: &str, f: &str| {
                Spread::of(
                    &records
                        .iter()
                        .filter(|r| r.variant == v && r.status == "ok")
                        .filter_map(|r| r.figure(f))
                        .collect::<Vec<_>>(),
                )
            };
            let spread = |v: &str| figure_spread(v, "large_done_over_alone");
            let large = match spread(&row_label("auto", Phase::Loaded)) {
                Some(a) => format!(
                    "; large objects done / alone (goal <= 1.10): auto {}{}",
                    x2(&a),
                    spread(POOL_LOADED_ROW).map(|p| format!(", h1-pool {}", x2(&p))).unwrap_or_default()
                ),
                None => String::new(),
            };
            // On a link (mixed_hol.rs, "On a link"): the same goal held against the
            // link's rate, and the connections each side held while the smalls ran
            // (issue 5: "with fewer connections than the pool").
            let auto_row = row_label("auto", Phase::Loaded);
            let link = match (
                figure_spread(&auto_row, "large_done_over_link"),
                figure_spread(POOL_LOADED_ROW, "large_done_over_link"),
            ) {
                (Some(a), pool) => {
                    let held = |v: &str| {
                        figure_spread(v, "connections_open_mean_window")
                            .map(|s| format!("{:.0}", s.median))
                            .unwrap_or_else(|| "-".into())
                    };
                    format!(
                        "; large done / link-limited (goal <= 1.10): auto {}{}; connections held while the smalls ran: auto {}, h1-pool {}",
                        x2(&a),
                        pool.map(|p| format!(", h1-pool {}", x2(&p))).unwrap_or_default(),
                        held(&auto_row),
                        held(POOL_LOADED_ROW)
                    )
                }
                _ => String::new(),
            };
            // A cap map (`--auto-max-connections`) has no plain auto, h2 or pipeline rows.
            let others = if others.is_empty() { String::new() } else { format!("; {}", others.join(", ")) };
            h(
                published,
                format!("small GET latency loaded/unloaded, p50 / p99: h1-pool (50 conns) {} / {}{others}{peers}{auto}{large}{link}", x(&p50), p99("h1-pool")),
                judge_ratio(p50.median, 15.0, 15.0),
            )
        }
        None => h(published, none(), "no"),
    }
}

/// `mixed-hol` as the suite's table holds it (workload.rs's [`crate::workload::WorkloadDef`]).
pub const WORKLOAD: crate::workload::WorkloadDef = crate::workload::WorkloadDef {
    name: "mixed-hol",
    quick: "40 small GETs (4 KiB-1 MiB) beside ranged 8 MiB reads held in flight, s3 profile",
    full: "2,000 small GETs at 100/s beside 100 ranged 8 MiB reads held in flight, s3 profile",
    peers: &PEERS,
    in_suite: true,
    default_link: None,
    run: run_with_defaults,
    claim,
};

/// Runs `mixed-hol` with its default parameters at `s` (`repeats` when given) and the peers
/// of `o` that it sets beside ferry.
pub fn run_with_defaults(
    s: Size,
    repeats: Option<usize>,
    o: &crate::options::RunOptions,
) -> anyhow::Result<crate::options::Outcome> {
    let mut p = MixedHolParams::new(s);
    p.repeats = repeats.unwrap_or(p.repeats);
    p.peers = WORKLOAD.peers_of(o);
    p.link = o.link.as_ref().map(|l| l.preset());
    crate::runner::run(&mixed_hol(s, &p), o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_and_sizes() {
        let q = MixedHolParams::new(Size::Quick);
        let f = MixedHolParams::new(Size::Full);
        assert_eq!((q.larges, q.large_bytes, q.smalls, q.connections), (8, 64 << 20, 30, 50));
        assert_eq!((f.larges, f.large_bytes, f.smalls), (8, 256 << 20, 2_000));
        assert!(q.large_in_flight > q.connections, "the load oversubscribes the pool");
        assert!(q.arrival_window() < Duration::from_secs(3));
        let w = mixed_hol(Size::Quick, &q);
        assert_eq!(w.variants.len(), CLIENTS.len() * 2, "the clients; quick leaves the small-pool row out");
        assert_eq!(
            mixed_hol(Size::Full, &f).variants.len(),
            (CLIENTS.len() + 1) * 2,
            "the clients and the small-pool row"
        );
        let Some(r) = w.variants[1].task.step::<MixedHolRun>() else { panic!("not mixed-hol") };
        assert_eq!(r.phase, Phase::Loaded);
        assert_eq!(r.smalls.len(), 30);
        assert!(r.smalls.iter().all(|(_, s)| (4096..=1 << 20).contains(s)));
        assert_eq!(r.smalls[17].0, "mixed-hol/p01/small-000017");
        assert_eq!(r.larges[0], format!("mixed-hol/size={}/large-0", 64 << 20));
        // 8 objects of 64 MiB in 8 MiB parts.
        assert_eq!(r.parts.len(), 64);
        // Only auto's smalls carry the size hint; each mode warms up for its own ramp.
        for v in &w.variants {
            let Some(r) = v.task.step::<MixedHolRun>() else { panic!("not mixed-hol") };
            let mode = v.client.unwrap().mode;
            assert_eq!(r.size_hint, mode == Mode::Auto, "{}", v.label);
            let warmup =
                if matches!(mode, Mode::H1Pool | Mode::H1Pipeline) { q.load_warmup_at_once } else { q.load_warmup };
            assert_eq!(r.load_warmup, warmup, "{}", v.label);
        }
        // The same seed gives the same workload.
        assert_eq!(mixed_hol(Size::Quick, &q), w);
        let h2 = w.variants.iter().find(|v| v.client.unwrap().mode == Mode::H2).unwrap();
        assert!(w.servers[h2.server.unwrap()].args().windows(2).any(|a| a == ["--h2", "on"]));
        assert!(w
            .variants
            .iter()
            .all(|v| v.client.unwrap().max_connections == if v.label.starts_with(SMALL_POOL.0) { 10 } else { 50 }));
        // Peer rows: the mixed-hol peers only, unloaded and loaded, on the s3 server.
        let mut q = q.clone();
        q.peers = vec![crate::peers::Peer::Boto3, crate::peers::Peer::S5cmd, crate::peers::Peer::Obstore];
        let w = mixed_hol(Size::Quick, &q);
        let peer_rows: Vec<&Variant> = w.variants.iter().filter(|v| matches!(v.task, Task::Peer { .. })).collect();
        let labels: Vec<&str> = peer_rows.iter().map(|v| v.label.as_str()).collect();
        assert_eq!(labels, ["boto3 · unloaded", "obstore · unloaded", "boto3 · loaded", "obstore · loaded"]);
        for v in peer_rows {
            let Task::Peer {
                op: crate::peers::PeerOp::MixedHol { smalls, parts, loaded, connections, load_warmup, .. },
                ..
            } = &v.task
            else {
                panic!("not mixed_hol")
            };
            assert_eq!((smalls.len(), parts.len(), *connections), (30, 64, 50));
            assert_eq!(*load_warmup, q.load_warmup_peers);
            assert_eq!(*loaded, v.label.ends_with("loaded") && !v.label.ends_with("unloaded"));
            assert!(!v.once && v.server == Some(0), "peer rows repeat like ferry's");
        }
    }

    #[test]
    fn the_cap_map_has_the_pool_and_one_auto_row_per_cap() {
        let mut p = MixedHolParams::new(Size::Full);
        p.auto_caps = vec![24, 50];
        let w = mixed_hol(Size::Full, &p);
        let rows: Vec<(&str, Mode, usize)> = w
            .variants
            .iter()
            .map(|v| (v.label.as_str(), v.client.unwrap().mode, v.client.unwrap().max_connections))
            .collect();
        assert_eq!(
            rows,
            [
                ("h1-pool · unloaded", Mode::H1Pool, 50),
                (POOL_LOADED_ROW, Mode::H1Pool, 50),
                ("auto [max 24 conns] · unloaded", Mode::Auto, 24),
                ("auto [max 24 conns] · loaded", Mode::Auto, 24),
                ("auto [max 50 conns] · unloaded", Mode::Auto, 50),
                ("auto [max 50 conns] · loaded", Mode::Auto, 50),
            ]
        );
        assert_eq!(w.params["auto_max_connections"], json!([24, 50]));
        for v in &w.variants {
            let Some(r) = v.task.step::<MixedHolRun>() else { panic!("not mixed-hol") };
            assert_eq!(r.size_hint, v.client.unwrap().mode == Mode::Auto, "{}", v.label);
        }
    }

    #[test]
    fn ratio_columns_hold_loaded_rows_against_the_loaded_pool() {
        assert_eq!(row_label("h1-pool", Phase::Loaded), POOL_LOADED_ROW);
        assert!(row_label("auto", Phase::Loaded).ends_with(LOADED_SUFFIX));
        assert!(!row_label("auto", Phase::Unloaded).ends_with(LOADED_SUFFIX));
        let w = mixed_hol(Size::Quick, &MixedHolParams::new(Size::Quick));
        assert!(w.variants.iter().any(|v| v.label == POOL_LOADED_ROW));
        let ratios: Vec<&Column> = COLUMNS.iter().filter(|c| c.ratio_to.is_some()).collect();
        assert_eq!(
            ratios.iter().map(|c| c.figure).collect::<Vec<_>>(),
            ["small_latency_p50_ms", "small_latency_p99_ms"]
        );
    }

    #[test]
    fn load_window_counts_bytes_received_while_open() {
        // A part that began before the window and one that ends after it count for the
        // bytes that arrived inside it.
        let w = LoadWindow::default();
        w.received(5); // before the smalls: not counted
        w.open();
        w.received(3); // tail of a part begun before
        w.received(4); // head of a part that ends after
        assert_eq!(w.close(), 7);
        w.received(9); // after the smalls: not counted
        assert_eq!(w.close(), 7);
        assert_eq!(w.total(), 5 + 3 + 4 + 9, "every byte, window or not");
    }

    #[test]
    fn warm_up_samples_the_load_and_measures_its_end_alone() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let window = Arc::new(LoadWindow::default());
        let feed = window.clone();
        let trace = rt.block_on(async move {
            // A load receiving 1,000 bytes every 10 ms.
            let feeder = tokio::spawn(async move {
                loop {
                    feed.received(1_000);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            });
            let t = warm_up(&window, Duration::from_millis(400), Duration::from_millis(150)).await;
            feeder.abort();
            t
        });
        let (bytes, span) = trace.alone;
        assert!(
            span >= Duration::from_millis(150) && span < Duration::from_millis(400),
            "the alone span is the warm-up's end: {span:?}"
        );
        assert!(bytes > 0 && bytes < 400 * 100, "only the end's bytes: {bytes}");
        let p = &trace.points;
        assert_eq!(p[0][0], 0.0);
        assert!(
            p.len() >= 400 / WARMUP_SAMPLE.as_millis() as usize,
            "a sample every {WARMUP_SAMPLE:?}: {} samples",
            p.len()
        );
        assert!(p.windows(2).all(|w| w[1][0] > w[0][0] && w[1][1] >= w[0][1]), "time and bytes grow: {p:?}");
        assert!(p.last().unwrap()[0] >= 0.4, "the samples cover the warm-up");
    }

    #[test]
    fn large_done_is_the_large_objects_at_each_rate() {
        let run = MixedHolRun {
            phase: Phase::Loaded,
            smalls: Arc::new(Vec::new()),
            small_rate: 100.0,
            size_hint: false,
            larges: Arc::new(large_keys(2, 20)),
            parts: Arc::new(large_parts(2, 20, 8)),
            large_in_flight: 4,
            load_warmup: Duration::from_secs(1),
            load_alone: Duration::from_millis(500),
            seed: 1,
            put_concurrency: 1,
            link_bytes_per_s: None,
        };
        assert_eq!(run.large_total_bytes(), 40, "each large once");
        let mut rec = RunRecord::default();
        // Loaded at 8 B/s, alone at 10 B/s: 5 s against 4 s, 1.25x.
        large_done_figures(&mut rec, run.large_total_bytes(), 8.0, 10.0);
        assert_eq!(rec.figure("large_done_s"), Some(5.0));
        assert_eq!(rec.figure("large_alone_done_s"), Some(4.0));
        assert_eq!(rec.figure("large_done_over_alone"), Some(1.25));
        // Nothing while the smalls ran: no done time, no ratio.
        let mut rec = RunRecord::default();
        large_done_figures(&mut rec, 40, 0.0, 10.0);
        assert_eq!((rec.figure("large_done_s"), rec.figure("large_done_over_alone")), (None, None));
        for size in [Size::Quick, Size::Full] {
            let q = MixedHolParams::new(size);
            for warmup in [q.load_warmup, q.load_warmup_at_once, q.load_warmup_peers] {
                assert!(
                    q.load_alone > Duration::ZERO && q.load_alone < warmup,
                    "the alone span is the warm-up's end, after its ramp"
                );
            }
            assert!(q.load_warmup >= q.load_warmup_at_once, "auto and h2 ramp longest");
        }
    }

    #[test]
    fn on_a_link_the_loaded_rows_are_held_against_its_rate_and_iperf3_measures_it() {
        let mut p = MixedHolParams::new(Size::Quick);
        let plain = mixed_hol(Size::Quick, &p);
        assert!(
            plain.variants.iter().all(|v| !matches!(v.task, Task::Iperf3 { .. })),
            "no link, no iperf3 row (loopback as before)"
        );
        p.link = Some(ferry_link::Preset::INSTANCE);
        let w = mixed_hol(Size::Quick, &p);
        assert_eq!(w.variants.len(), plain.variants.len() + 1, "one iperf3 row more");
        let i3: Vec<&Variant> = w.variants.iter().filter(|v| matches!(v.task, Task::Iperf3 { .. })).collect();
        assert_eq!(i3.len(), 1);
        assert!(
            i3[0].once && i3[0].label == IPERF3_ROW && i3[0].server.is_none() && i3[0].client.is_none(),
            "measured once per workload run"
        );
        for v in &w.variants {
            if let Some(r) = v.task.step::<MixedHolRun>() {
                assert_eq!(r.link_bytes_per_s, Some(312_500_000.0), "{}: 2.5 Gbit/s of payload", v.label);
            }
        }
        assert_eq!(w.params["link_rate_bits_per_s"], json!(2_500_000_000u64));
        // The link's columns only with a link; every other column in its place.
        let (crate::workload::Shape::Columns(plain_cols), crate::workload::Shape::Columns(link_cols)) =
            (plain.shape, w.shape)
        else {
            panic!("column tables")
        };
        assert_eq!((plain_cols, link_cols.len()), (COLUMNS, COLUMNS.len() + 4));
        assert!(COLUMNS.iter().all(|c| link_cols.contains(c)), "every loopback column kept");
        assert!(
            link_cols.iter().any(|c| c.figure == "large_done_over_link")
                && !COLUMNS.iter().any(|c| c.figure == "large_done_over_link")
        );
        // The figures: 40 bytes over a 10 B/s link take 4 s; loaded at 8 B/s, 1.25x; with
        // the smalls' 1 B/s, the link was 90% used.
        let mut rec = RunRecord::default();
        link_limited_figures(&mut rec, 40, 8.0, 1.0, 10.0);
        assert_eq!(rec.figure("large_link_limited_s"), Some(4.0));
        assert_eq!(rec.figure("large_done_over_link"), Some(1.25));
        assert_eq!(rec.figure("link_used"), Some(0.9));
        assert_eq!(rec.figure("large_link_bytes_per_s"), Some(10.0));
        // No bytes while the smalls ran: the link-limited time, no ratio.
        let mut rec = RunRecord::default();
        link_limited_figures(&mut rec, 40, 0.0, 0.0, 10.0);
        assert_eq!((rec.figure("large_link_limited_s"), rec.figure("large_done_over_link")), (Some(4.0), None));
    }

    #[test]
    fn parts_cover_each_large_exactly() {
        let parts = large_parts(3, 20, 8);
        assert_eq!(parts.len(), 9);
        for k in 0..3 {
            let mine: Vec<(u64, u64)> = parts.iter().filter(|p| p.0 == k).map(|p| (p.1, p.2)).collect();
            assert_eq!(mine, [(0, 7), (8, 15), (16, 19)]);
        }
        // Part j of every object comes before part j+1 of any.
        assert_eq!(parts[..3].iter().map(|p| p.1).collect::<Vec<_>>(), [0, 0, 0]);
        assert_eq!(large_parts(1, 5, 100), [(0, 0, 4)]);
    }

    fn report_rec(variant: &str, repeat: usize, p50: f64, p99: f64) -> RunRecord {
        let mut r = RunRecord { variant: variant.into(), repeat, status: "ok".into(), ..RunRecord::default() };
        r.set("small_latency_p50_ms", p50);
        r.set("small_latency_p99_ms", p99);
        r
    }

    #[test]
    fn mixed_hol_rows_carry_their_ratio_to_the_loaded_pool_per_repeat() {
        let w = mixed_hol(Size::Quick, &MixedHolParams::new(Size::Quick));
        let ctx = crate::record::RunContext {
            bench: "mixed-hol".into(),
            run_id: "1-2".into(),
            git_sha: None,
            git_dirty: None,
            machine: crate::sys::Machine { nproc: 2, kernel: "6.1".into() },
        };
        // Paired by repeat: auto is 1/10 then 1/5 of the pool (median 0.15), its p99 1/20
        // both times; a repeat without the pool's row pairs with nothing.
        let records = vec![
            report_rec("h1-pool · unloaded", 1, 5.0, 9.0),
            report_rec("h1-pool · loaded", 1, 100.0, 400.0),
            report_rec("auto · loaded", 1, 10.0, 20.0),
            report_rec("h1-pool · loaded", 2, 50.0, 200.0),
            report_rec("auto · loaded", 2, 10.0, 10.0),
            report_rec("auto · loaded", 3, 1.0, 1.0),
        ];
        let table = crate::report::render(&w, &records, &ctx);
        let row = |label: &str| {
            table
                .lines()
                .find(|l| l.starts_with(&format!("| {label} |")))
                .unwrap_or_else(|| panic!("no row {label} in\n{table}"))
                .to_owned()
        };
        let cells = |label: &str| row(label).split(" | ").map(str::to_owned).collect::<Vec<_>>();
        let header: Vec<String> =
            table.lines().find(|l| l.starts_with("| row |")).unwrap().split(" | ").map(str::to_owned).collect();
        let col =
            |name: &str| header.iter().position(|h| h.starts_with(name)).unwrap_or_else(|| panic!("no column {name}"));
        let (p50, p99) = (col("p50 / h1-pool's"), col("p99 / h1-pool's"));
        assert_eq!(cells("auto · loaded")[p50], "0.15x (0.10-0.20)");
        assert_eq!(cells("auto · loaded")[p99], "0.05x");
        assert_eq!(cells("h1-pool · loaded")[p50], "1.00x");
        // Unloaded rows are not held against the loaded pool.
        assert_eq!(cells("h1-pool · unloaded")[p50], "-");
    }
}
