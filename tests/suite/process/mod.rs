//! The tests that spawn processes: the quick-start job (`examples/job.rs`, found by `common::job_binary`) killed
//! at seeded moments, two drivers of one job at once, and worker processes killed or stopped mid-task.

mod kill;
mod shared_processes;
mod two_drivers;
