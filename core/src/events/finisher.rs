//! Ended connections finished in a thread of their own, for the pass over one capture held
//! whole (`flow_tables` of one path): the reading thread hands each ended connection's events
//! over (`Events::finish_connection`) and reads on, while this thread finishes them into the
//! tables (`ConnectionEvents::finish`, about a third of the pass's work on real traffic).
//! Nothing else runs beside that pass, so the second core would otherwise sit idle. A pass a
//! batch at a time finishes in place: its detectors' thread already keeps the second core
//! busy (finished apart, the batches' pass alone took a fifth less time, the whole analysis
//! no less, with more memory). A run over many small captures finishes in place too: the wait
//! for this thread at each capture's end cost more than their finishing.
//!
//! The connections are finished in the order they are handed over, so the tables are the same
//! as those the reading thread would make itself.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::{self, JoinHandle};

use super::{ConnectionEvents, Found, Made, Mark};
use crate::flows::packets::Finishing;

/// An ended connection handed over to be finished.
pub(super) struct Ended {
    pub connection: u32,
    pub finishing: Finishing,
    pub events: Box<ConnectionEvents>,
}

enum Work {
    Connection(Ended),
    /// A capture begins: what is found from here is its own.
    CaptureBegins,
    /// The capture begun last has been read: say whether its connections were finished.
    CaptureRead,
    /// The capture begun last could not be read: what was found of it goes.
    CaptureFailed,
    /// Every connection has been handed over: give the tables back.
    Finish,
}

enum Reply {
    /// Whether every connection of the capture read was finished (none panicked).
    CaptureFinished(bool),
    Found(Box<Found>),
}

/// The reading thread's end of the finishing thread.
pub struct Finisher {
    work: Option<Sender<Work>>,
    replies: Receiver<Reply>,
    thread: Option<JoinHandle<()>>,
}

impl Finisher {
    /// Start the finishing thread, with `made` made of each connection beside its events.
    pub(super) fn start(made: Made) -> Finisher {
        let (work, waiting) = mpsc::channel();
        let (reply, replies) = mpsc::channel();
        let thread = thread::Builder::new()
            .name("nagledetect-finishing".into())
            .spawn(move || finish_as_handed(&waiting, &reply, made))
            .expect("a thread to finish connections in");
        Finisher {
            work: Some(work),
            replies,
            thread: Some(thread),
        }
    }

    fn send(&self, work: Work) {
        // The thread ends only once this end lets go, or when it panicked: then the pass
        // panics too, and its caller reports an internal error.
        self.work
            .as_ref()
            .and_then(|sender| sender.send(work).ok())
            .expect("the finishing thread is running");
    }

    pub(super) fn finish(&self, ended: Ended) {
        self.send(Work::Connection(ended));
    }

    pub(super) fn capture_begins(&self) {
        self.send(Work::CaptureBegins);
    }

    pub(super) fn capture_failed(&self) {
        self.send(Work::CaptureFailed);
    }

    /// Whether every connection of the capture begun last was finished, once the thread
    /// has finished them: where one panicked, the capture is not analysed, as where its read
    /// did.
    pub(super) fn capture_read(&self) -> bool {
        self.send(Work::CaptureRead);
        matches!(self.replies.recv(), Ok(Reply::CaptureFinished(true)))
    }

    /// The tables of every connection handed over, once the thread has finished them.
    pub(super) fn found(mut self) -> Found {
        self.send(Work::Finish);
        let Ok(Reply::Found(found)) = self.replies.recv() else {
            panic!("the finishing thread gives its tables");
        };
        self.join();
        *found
    }

    fn join(&mut self) {
        // Letting go of the work channel ends the thread, what it had not finished with it.
        self.work = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Finisher {
    fn drop(&mut self) {
        self.join();
    }
}

/// The finishing thread: the work as it comes, until the tables are asked for.
fn finish_as_handed(waiting: &Receiver<Work>, reply: &Sender<Reply>, made: Made) {
    let mut found = Found::default();
    let mut capture_began: Option<Mark> = None;
    let mut capture_finished = true;
    while let Ok(work) = waiting.recv() {
        let replied = match work {
            Work::Connection(Ended {
                connection,
                finishing,
                events,
            }) => {
                let finished = catch_unwind(AssertUnwindSafe(|| {
                    events.finish(connection, &finishing, &mut found, made);
                }));
                capture_finished &= finished.is_ok();
                None
            }
            Work::CaptureBegins => {
                capture_began = Some(found.mark());
                capture_finished = true;
                None
            }
            Work::CaptureRead => Some(Reply::CaptureFinished(capture_finished)),
            Work::CaptureFailed => {
                if let Some(mark) = capture_began {
                    found.truncate(mark);
                }
                None
            }
            Work::Finish => Some(Reply::Found(Box::new(std::mem::take(&mut found)))),
        };
        if let Some(answer) = replied
            && reply.send(answer).is_err()
        {
            return;
        }
    }
}
