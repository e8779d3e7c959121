//! The tests that spawn processes: the quick-start job (`examples/job.rs`, found by `common::job_binary`) killed
//! at seeded moments, two drivers of one job at once, worker processes killed or stopped mid-task, and the job
//! as a newcomer runs it (its store closed cleanly, its output in words).

mod kill;
mod quick_start;
mod shared_processes;
mod two_drivers;
