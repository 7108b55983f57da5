//! The process's own figures for `/metrics` (`process_*`).

/// The process's own figures, read from `/proc/self` at each scrape, under
/// the standard Prometheus names (`process_*`, without kubefan's prefix):
/// resident memory, CPU seconds, open and allowed file descriptors, start
/// time. Hand-written (Linux `/proc` reads) because prometheus-client has
/// no process collector; elsewhere they are simply absent.
#[derive(Debug)]
pub(super) struct ProcessCollector {
    pub(super) start_time: f64,
}

/// Clock ticks per second of `/proc/self/stat` (USER_HZ): 100 on every
/// Linux architecture kubefan is built for.
const USER_HZ: f64 = 100.0;

impl ProcessCollector {
    fn read() -> Option<(u64, f64, u64, Option<u64>)> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let rss_kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // Fields after the command name (which may hold spaces): state is
        // field 3, utime and stime fields 14 and 15.
        let after = stat.rsplit_once(')')?.1;
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks: u64 =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        let open = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
        let max = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|limits| {
                limits
                    .lines()
                    .find(|l| l.starts_with("Max open files"))?
                    .split_whitespace()
                    .nth(3)?
                    .parse()
                    .ok()
            });
        Some((rss_kib * 1024, ticks as f64 / USER_HZ, open, max))
    }
}

impl prometheus_client::collector::Collector for ProcessCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        let gauge = |encoder: &mut prometheus_client::encoding::DescriptorEncoder,
                     name: &str,
                     help: &str,
                     value: f64| {
            let g = ConstGauge::new(value);
            let m = encoder.encode_descriptor(name, help, None, g.metric_type())?;
            g.encode(m)
        };
        gauge(
            &mut encoder,
            "process_start_time_seconds",
            "Start time of the process since the Unix epoch, in seconds",
            self.start_time,
        )?;
        let Some((rss, cpu, open, max)) = Self::read() else {
            return Ok(());
        };
        gauge(
            &mut encoder,
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            rss as f64,
        )?;
        gauge(
            &mut encoder,
            "process_open_fds",
            "Open file descriptors",
            open as f64,
        )?;
        if let Some(max) = max {
            gauge(
                &mut encoder,
                "process_max_fds",
                "Most file descriptors the process may open",
                max as f64,
            )?;
        }
        let c = ConstCounter::new(cpu);
        let m = encoder.encode_descriptor(
            "process_cpu_seconds",
            "User and system CPU time spent, in seconds",
            None,
            c.metric_type(),
        )?;
        c.encode(m)
    }
}
