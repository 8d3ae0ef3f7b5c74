//! CPU time as the kernel accounts it, read from `/proc`: each CPU's busy, idle and stolen
//! time (`/proc/stat`), and each process's own CPU time, user + system, summed over its
//! threads, exited ones included (`/proc/PID/stat`), with what a workload needs to tell
//! processes apart (command line, allowed CPUs, PID namespace, parent).
//!
//! The virtual cluster's nodes have PID namespaces of their own, nested in the host's: from
//! here every node process is visible under its host pid, its parent is given as a host pid,
//! and its namespace tells which node it is on.
//!
//! Owns reading and parsing those files; must not decide what a process is for (the workloads
//! do). Figures are in clock ticks (`USER_HZ`, 100 per second on Linux) until converted with
//! [`ticks_per_s`]: 10 ms resolution, fine for spans of seconds.

use crate::error::{Error, io};

/// One CPU's time since boot, in clock ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTicks {
    /// user + nice + system + irq + softirq (guest time is already part of user).
    pub busy: u64,
    /// idle + iowait (iowait is idle time with I/O outstanding).
    pub idle: u64,
    /// Time the hypervisor ran something else while this virtual CPU wanted to run.
    pub steal: u64,
}

impl CpuTicks {
    /// `self - earlier`, field by field (0 where a counter went backwards).
    pub fn since(&self, earlier: &CpuTicks) -> CpuTicks {
        CpuTicks {
            busy: self.busy.saturating_sub(earlier.busy),
            idle: self.idle.saturating_sub(earlier.idle),
            steal: self.steal.saturating_sub(earlier.steal),
        }
    }
}

/// The per-CPU lines (`cpuN ...`) of a `/proc/stat` text, as (N, ticks) in file order; the
/// all-CPU `cpu` line and every other line are skipped.
pub fn parse_proc_stat(text: &str) -> Vec<(usize, CpuTicks)> {
    text.lines()
        .filter_map(|line| {
            let mut it = line.split_whitespace();
            let n: usize = it.next()?.strip_prefix("cpu")?.parse().ok()?;
            let v: Vec<u64> = it.map_while(|x| x.parse().ok()).collect();
            // user nice system idle iowait irq softirq steal [guest guest_nice]
            let at = |i: usize| v.get(i).copied().unwrap_or(0);
            (v.len() >= 4).then(|| {
                (
                    n,
                    CpuTicks {
                        busy: at(0) + at(1) + at(2) + at(5) + at(6),
                        idle: at(3) + at(4),
                        steal: at(7),
                    },
                )
            })
        })
        .collect()
}

/// Every online CPU's ticks now.
pub fn read_cpus() -> Result<Vec<(usize, CpuTicks)>, Error> {
    let text = std::fs::read_to_string("/proc/stat").map_err(io("cannot read /proc/stat"))?;
    let cpus = parse_proc_stat(&text);
    if cpus.is_empty() {
        return Err(Error::Failed("/proc/stat has no cpuN lines".into()));
    }
    Ok(cpus)
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`; 100 where it cannot be read).
pub fn ticks_per_s() -> f64 {
    // SAFETY: sysconf only reads a system constant.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// What `/proc/PID/stat` says of one process (or, under `task/TID`, one thread).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PidStat {
    /// Its name (`comm`, at most 15 bytes, may hold spaces and parentheses).
    pub comm: String,
    /// Its parent's pid, in the reader's PID namespace.
    pub ppid: u32,
    /// utime + stime: CPU time in user and kernel mode, in clock ticks (for a process, of all
    /// its threads, those that ended included).
    pub cpu_ticks: u64,
    /// When it started, in clock ticks after boot (tells a reused pid from the old process).
    pub starttime: u64,
}

/// Parses a `/proc/PID/stat` text. `comm` is taken up to the *last* `)`, since it may itself
/// contain `)` and spaces.
pub fn parse_pid_stat(text: &str) -> Option<PidStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    // Fields after comm, numbered from 3 (state) as in proc(5).
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { rest.get(n - 3)?.parse().ok() };
    Some(PidStat {
        comm,
        ppid: u32::try_from(field(4)?).ok()?,
        cpu_ticks: field(14)? + field(15)?,
        starttime: field(22)?,
    })
}

/// This process's own CPU time (user + system, all its threads, ended ones included), in
/// seconds: the figure `/proc/self/stat` gives as utime + stime, read from the process CPU
/// clock, to the nanosecond rather than the clock tick.
pub fn self_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; this clock always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// Parses a CPU list as in `Cpus_allowed_list` or `taskset -c` (`0-3,8,10-11`).
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut v = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if a > b {
                    return None;
                }
                v.extend(a..=b);
            }
            None => v.push(part.trim().parse().ok()?),
        }
    }
    v.sort_unstable();
    v.dedup();
    (!v.is_empty()).then_some(v)
}

/// One process as seen from here.
#[derive(Debug, Clone)]
pub struct Process {
    /// Its pid in this process's PID namespace.
    pub pid: u32,
    /// Its `/proc/PID/stat`.
    pub stat: PidStat,
    /// Its arguments (empty for kernel threads).
    pub cmdline: Vec<String>,
    /// The CPUs it may run on (`Cpus_allowed_list`).
    pub cpus_allowed: Vec<usize>,
    /// Its PID namespace (`pid:[INODE]`, the link `/proc/PID/ns/pid`).
    pub pid_ns: String,
}

/// Process `pid` now; `None` when it is gone (or unreadable).
pub fn process(pid: u32) -> Option<Process> {
    let dir = format!("/proc/{pid}");
    let stat = parse_pid_stat(&std::fs::read_to_string(format!("{dir}/stat")).ok()?)?;
    let cmdline = std::fs::read(format!("{dir}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default();
    let cpus_allowed = std::fs::read_to_string(format!("{dir}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .and_then(parse_cpu_list)
        .unwrap_or_default();
    let pid_ns = pid_namespace(pid).unwrap_or_default();
    Some(Process {
        pid,
        stat,
        cmdline,
        cpus_allowed,
        pid_ns,
    })
}

/// Process `pid`'s PID namespace (`pid:[INODE]`).
pub fn pid_namespace(pid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// Every process visible in `/proc` now; those that end while being read are left out.
pub fn processes() -> Result<Vec<Process>, Error> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").map_err(io("cannot list /proc"))? {
        let Ok(e) = e else { continue };
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(p) = process(pid) {
            v.push(p);
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;

    /// The calling thread's CPU time by the kernel's own clock, in seconds.
    fn thread_cpu_clock_s() -> f64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes into the timespec we own.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
    }

    fn thread_stat(tid: i64) -> PidStat {
        let text =
            std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).expect("thread stat");
        parse_pid_stat(&text).expect("parses")
    }

    #[test]
    fn a_spinning_thread_shows_in_its_stat_its_process_and_the_cpus_busy_time() {
        let hz = ticks_per_s();
        let me = std::process::id();
        let process_before = process(me).unwrap().stat.cpu_ticks;
        let clock_before = self_cpu_s();
        let cpus_before = read_cpus().unwrap();
        let (tx, rx) = mpsc::channel();
        let release = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: gettid has no arguments and cannot fail.
                let tid = unsafe { libc::syscall(libc::SYS_gettid) };
                let before = thread_stat(tid);
                // Spin until the kernel's thread clock says 200 ms of CPU were used.
                let t0 = thread_cpu_clock_s();
                let mut x = 0u64;
                while thread_cpu_clock_s() - t0 < 0.2 {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
                let after = thread_stat(tid);
                tx.send((before, after)).unwrap();
                while !release.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
            });
            let (before, after) = rx.recv().unwrap();
            release.store(true, Ordering::SeqCst);
            assert_eq!(before.starttime, after.starttime);
            assert_eq!(after.ppid, std::os::unix::process::parent_id());
            let grew = (after.cpu_ticks - before.cpu_ticks) as f64 / hz;
            assert!(
                (0.1..1.0).contains(&grew),
                "thread's utime+stime grew by {grew} s"
            );
        });
        // The process's figure sums its threads, the one that ended included, and agrees with
        // the process CPU clock to a couple of ticks.
        let process_grew = (process(me).unwrap().stat.cpu_ticks - process_before) as f64 / hz;
        let clock_grew = self_cpu_s() - clock_before;
        assert!(process_grew >= 0.1, "process grew by {process_grew} s");
        assert!(
            (process_grew - clock_grew).abs() <= 3.0 / hz,
            "/proc/self/stat: {process_grew} s, process CPU clock: {clock_grew} s"
        );
        // The CPUs were busy (or, under a hypervisor, stolen) at least as long, in total.
        let cpus_after = read_cpus().unwrap();
        assert_eq!(
            cpus_before.iter().map(|c| c.0).collect::<Vec<_>>(),
            cpus_after.iter().map(|c| c.0).collect::<Vec<_>>()
        );
        let busy: u64 = cpus_after
            .iter()
            .zip(&cpus_before)
            .map(|((_, a), (_, b))| {
                let d = a.since(b);
                d.busy + d.steal
            })
            .sum();
        assert!(busy as f64 / hz >= 0.1, "CPUs busy {} s", busy as f64 / hz);
    }

    #[test]
    fn this_process_is_found_with_its_command_line_cpus_and_namespace() {
        let me = std::process::id();
        let all = processes().unwrap();
        let p = all.iter().find(|p| p.pid == me).expect("finds itself");
        let exe = std::env::current_exe().unwrap();
        assert!(
            p.cmdline[0].ends_with(exe.file_name().unwrap().to_str().unwrap()),
            "{:?}",
            p.cmdline
        );
        assert_eq!(p.stat.ppid, std::os::unix::process::parent_id());
        assert!(!p.cpus_allowed.is_empty());
        assert!(p.pid_ns.starts_with("pid:["), "{}", p.pid_ns);
        // Its parent is there too, in the same namespace.
        let parent = all.iter().find(|q| q.pid == p.stat.ppid).expect("parent");
        assert_eq!(parent.pid_ns, p.pid_ns);
        assert!(process(u32::MAX).is_none());
    }

    #[test]
    fn stat_lines_parse_as_proc5_lays_them_out() {
        let text = "cpu  10 1 5 100 7 2 3 4 0 0\n\
                    cpu0 6 1 3 40 2 1 2 3 9 0\n\
                    cpu1 4 0 2 60 5 1 1 1 0 0\n\
                    intr 1234 5\nctxt 99\n";
        let v = parse_proc_stat(text);
        assert_eq!(v.len(), 2);
        assert_eq!(
            v[0],
            (
                0,
                CpuTicks {
                    busy: 6 + 1 + 3 + 1 + 2,
                    idle: 40 + 2,
                    steal: 3
                }
            )
        );
        assert_eq!(v[1].0, 1);
        assert_eq!(
            v[0].1.since(&CpuTicks {
                busy: 5,
                idle: 50,
                steal: 1
            }),
            CpuTicks {
                busy: 8,
                idle: 0,
                steal: 2
            }
        );
        // A comm with spaces and parentheses does not shift the fields.
        let s = "4242 (a) b (c)) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 31 0 0 20 0 3 0 \
                 987654 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0";
        let p = parse_pid_stat(s).unwrap();
        assert_eq!(p.comm, "a) b (c)");
        assert_eq!(p.ppid, 17);
        assert_eq!(p.cpu_ticks, 281);
        assert_eq!(p.starttime, 987654);
        assert!(parse_pid_stat("4242 (x) S 1").is_none());
        assert_eq!(parse_cpu_list("0-2,5,7-7\n"), Some(vec![0, 1, 2, 5, 7]));
        assert_eq!(parse_cpu_list("1"), Some(vec![1]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list(""), None);
    }
}
