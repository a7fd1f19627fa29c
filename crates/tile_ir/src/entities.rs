//! Entity references (`u32` newtypes) and the arenas that own their data.
//!
//! Like Cranelift's `entities.rs`: an entity is an index, its data lives in a
//! [`PrimaryMap`], and analyses keep their facts in a [`SecondaryMap`] beside the IR.

use std::fmt;
use std::marker::PhantomData;

/// A type that can index an arena.
pub trait EntityRef: Copy + Eq {
    /// Makes the reference from an arena index.
    fn new(index: usize) -> Self;
    /// The arena index.
    fn index(self) -> usize;
}

macro_rules! entity {
    ($(#[$m:meta])* $name:ident, $prefix:literal) => {
        $(#[$m])*
        #[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
        pub struct $name(pub u32);
        impl EntityRef for $name {
            fn new(index: usize) -> Self {
                $name(u32::try_from(index).expect("entity index overflows u32"))
            }
            fn index(self) -> usize {
                self.0 as usize
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

entity!(
    /// An SSA value: an operation result or a block argument.
    Value,
    "%"
);
entity!(
    /// An operation.
    Op,
    "op"
);
entity!(
    /// A basic block: arguments and a list of operations.
    Block,
    "^bb"
);
entity!(
    /// A region owned by an operation (the body of a `for`, a branch of an `if`).
    Region,
    "region"
);
entity!(
    /// An interned layout attribute.
    LayoutId,
    "#layout"
);

/// The arena that owns the data of one kind of entity.
#[derive(Clone, Debug)]
pub struct PrimaryMap<K: EntityRef, V> {
    items: Vec<V>,
    _key: PhantomData<K>,
}

impl<K: EntityRef, V> Default for PrimaryMap<K, V> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            _key: PhantomData,
        }
    }
}

impl<K: EntityRef, V> PrimaryMap<K, V> {
    /// Adds an item and returns its reference.
    pub fn push(&mut self, v: V) -> K {
        let k = K::new(self.items.len());
        self.items.push(v);
        k
    }
    /// How many items the arena holds.
    pub fn len(&self) -> usize {
        self.items.len()
    }
    /// Whether the arena is empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    /// Whether `k` indexes this arena.
    pub fn is_valid(&self, k: K) -> bool {
        k.index() < self.items.len()
    }
    /// Every reference with its data, in creation order.
    pub fn iter(&self) -> impl Iterator<Item = (K, &V)> {
        self.items.iter().enumerate().map(|(i, v)| (K::new(i), v))
    }
    /// Every reference, in creation order.
    pub fn keys(&self) -> impl Iterator<Item = K> {
        (0..self.items.len()).map(K::new)
    }
}

impl<K: EntityRef, V> std::ops::Index<K> for PrimaryMap<K, V> {
    type Output = V;
    fn index(&self, k: K) -> &V {
        &self.items[k.index()]
    }
}

impl<K: EntityRef, V> std::ops::IndexMut<K> for PrimaryMap<K, V> {
    fn index_mut(&mut self, k: K) -> &mut V {
        &mut self.items[k.index()]
    }
}

/// A side table keyed by entity, with a default for entities never written.
#[derive(Clone, Debug)]
pub struct SecondaryMap<K: EntityRef, V: Clone> {
    items: Vec<V>,
    default: V,
    _key: PhantomData<K>,
}

impl<K: EntityRef, V: Clone> SecondaryMap<K, V> {
    /// An empty map whose every entry reads as `default`.
    pub fn with_default(default: V) -> Self {
        Self {
            items: Vec::new(),
            default,
            _key: PhantomData,
        }
    }
    /// The entry for `k` (the default if never written).
    pub fn get(&self, k: K) -> &V {
        self.items.get(k.index()).unwrap_or(&self.default)
    }
    /// Writes the entry for `k`.
    pub fn set(&mut self, k: K, v: V) {
        let i = k.index();
        if i >= self.items.len() {
            self.items.resize(i + 1, self.default.clone());
        }
        self.items[i] = v;
    }
}

impl<K: EntityRef, V: Clone + Default> Default for SecondaryMap<K, V> {
    fn default() -> Self {
        Self::with_default(V::default())
    }
}

impl<K: EntityRef, V: Clone> std::ops::Index<K> for SecondaryMap<K, V> {
    type Output = V;
    fn index(&self, k: K) -> &V {
        self.get(k)
    }
}
